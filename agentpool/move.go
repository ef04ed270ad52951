package agentpool

import (
	"context"
	"errors"
	"fmt"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// A thread chooses its workspace (the in-thread "repo" command). Before the thread has a sandbox
// that only records the choice; later it moves the thread: the old sandbox, which holds the old
// checkout, is destroyed, and the next turn creates a new one that the Workspace fills with the
// new choice, with the thread's history replayed into it. A move never loses work silently: unless
// forced, it is refused while the old sandbox holds work that was not delivered (WorkspaceChooser.
// Unsaved).

// WorkspaceChooser is an optional Workspace capability: a thread chooses its workspace.
type WorkspaceChooser interface {
	// Choose reads and checks a choice (for a repository: the allowlist, and that it exists), with
	// no sandbox call. The returned Choice is recorded only if the move goes ahead.
	Choose(ctx context.Context, t WorkspaceThread, choice string) (Choice, error)
	// Unsaved describes the work in the thread's sandbox that a move would lose (commits not
	// pushed, uncommitted changes): words for the user, "" when there is none.
	Unsaved(ctx context.Context, sb sandbox.Sandbox, t WorkspaceThread) (string, error)
}

// Choice is a checked workspace choice.
type Choice struct {
	// Name is what was chosen, for the reply ("github.com/acme/api@main").
	Name string
	// Previous is what the thread had ("" for nothing, or its channel's default not yet used).
	Previous string
	// Same: the thread already works there; nothing is recorded or moved.
	Same bool
	// Record makes the choice the thread's, durably.
	Record func(ctx context.Context) error
}

// MoveRequest asks for a thread to move to another workspace.
type MoveRequest struct {
	Thread WorkspaceThread
	Choice string
	// Force moves even though the sandbox holds work not delivered, which is then lost.
	Force bool
}

// MoveResult is what a move did.
type MoveResult struct {
	Choice Choice
	// Replaced: the thread's sandbox was destroyed; the next turn starts a new one in the new
	// workspace. False when the thread had no sandbox yet (or the choice was the same).
	Replaced bool
	// Lost is the Unsaved description of the work a forced move dropped ("" for none).
	Lost string
}

// ErrUnsaved: a move was refused because the thread's sandbox holds work not delivered. The error
// is a *WorkspaceError whose Text says what.
var ErrUnsaved = errors.New("the sandbox holds work that was not delivered")

// ErrNoChooser: the pool's Workspace takes no choices (no repositories configured).
var ErrNoChooser = errors.New("this bot has no workspaces to choose from")

// Move queues the move behind the thread's earlier messages and returns at once (an error only if
// it could not be queued); done gets the outcome. It runs under the thread's store lock, so it
// never races a turn in this process or another.
func (p *Pool) Move(req MoveRequest, done func(MoveResult, error)) error {
	wc, ok := p.ws.(WorkspaceChooser)
	if !ok {
		return &Error{Code: EINVALID, Op: "move", Err: ErrNoChooser}
	}
	key := req.Thread.ThreadKey
	_, err := p.q.add(key, 0, func(ctx context.Context) {
		res, err := p.move(ctx, wc, req)
		done(res, err)
	}, func(reason error) { done(MoveResult{}, classify(EINVALID, "move", reason)) })
	return err
}

func (p *Pool) move(ctx context.Context, wc WorkspaceChooser, req MoveRequest) (MoveResult, error) {
	key := req.Thread.ThreadKey
	unlock, err := p.store.LockThread(ctx, key)
	if err != nil {
		return MoveResult{}, classify(EUNAVAILABLE, "move", fmt.Errorf("lock thread %s: %w", key, err))
	}
	defer unlock()
	ch, err := wc.Choose(ctx, req.Thread, req.Choice)
	if err != nil {
		return MoveResult{}, classify(EINVALID, "move", err)
	}
	res := MoveResult{Choice: ch}
	if ch.Same {
		return res, nil
	}
	cur, err := p.store.SessionGet(ctx, key)
	switch {
	case errors.Is(err, db.ErrNotFound):
		// Before the first turn: the choice is all there is to do.
		return res, classify(EUNAVAILABLE, "move", ch.Record(ctx))
	case err != nil:
		return res, classify(EUNAVAILABLE, "move", err)
	}
	live := cur.SandboxID != "" && cur.Status != db.SessionDestroyed
	if live {
		if res.Lost, err = p.unsaved(ctx, wc, cur, req.Thread); err != nil {
			return res, err
		}
		if res.Lost != "" && !req.Force {
			return res, &Error{Code: EINVALID, Op: "move", Err: &WorkspaceError{Text: res.Lost, Err: ErrUnsaved}}
		}
	}
	// Recorded first: if the destroy then fails, the sandbox is still the old one, but the cleanup
	// loop finishes the destroy and the thread's next sandbox is the new choice's.
	if err := ch.Record(ctx); err != nil {
		return res, classify(EUNAVAILABLE, "move", err)
	}
	if live {
		// Asking for unsaved work resolved the sandbox, which may have recreated it (a session left
		// destroying, or past its failed resumes) at a new generation: destroy what is there now.
		if cur, err = p.store.SessionGet(ctx, key); err != nil {
			return res, classify(EUNAVAILABLE, "move", err)
		}
		if _, err := p.life.destroy(ctx, cur); err != nil {
			return res, classify(ESANDBOX, "move: destroy the old sandbox", err)
		}
		res.Replaced = true
	}
	return res, nil
}

// unsaved asks the workspace what the thread's sandbox holds that was not delivered. A sandbox that
// is gone holds nothing; a paused one is resumed to be asked (the move destroys it right after).
func (p *Pool) unsaved(ctx context.Context, wc WorkspaceChooser, cur db.Session, t WorkspaceThread) (string, error) {
	h, err := p.life.handle(cur)
	if err != nil || h.IsZero() {
		return "", nil // an unusable handle names no sandbox to ask
	}
	info, err := p.life.provOf(h).Inspect(ctx, h)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return "", nil
	case err != nil:
		return "", classify(ESANDBOX, "move: inspect the sandbox", err)
	case info.State == sandbox.StateFailed:
		return "", nil
	}
	r, err := p.life.resolve(ctx, cur, func() {})
	if err != nil {
		return "", classify(ESANDBOX, "move: resume the sandbox", err)
	}
	text, err := wc.Unsaved(ctx, r.sb, t)
	if err != nil {
		return "", classify(ESANDBOX, "move: look for work not pushed", err)
	}
	return text, nil
}
