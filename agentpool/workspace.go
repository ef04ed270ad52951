package agentpool

import (
	"context"
	"errors"
	"fmt"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// Workspace fills a thread's sandbox before the agent works in it: a repository checkout
// (agentpool/repo, wired by cmd/threadbox). The pool knows nothing of git or forges.
type Workspace interface {
	// Prepare runs before each turn's prompt (and again if the turn had to replace the sandbox). It
	// returns at once when the sandbox already holds the workspace, so a lost sandbox is filled again
	// and a resumed one is not. note is told to the user with the answer ("" for nothing).
	Prepare(ctx context.Context, sb sandbox.Sandbox, t WorkspaceThread) (note string, err error)
}

// WorkspaceThread is what a Workspace knows of the thread.
type WorkspaceThread struct {
	ThreadKey, Platform, ChannelID, UserID string
	// UserName is the requesting user's display name ("" when unknown).
	UserName string
}

// WorkspaceError is a workspace failure with words for the user: the workspace knows what went
// wrong (a repository off the allowlist, a failing clone) better than a code can say. The bot shows
// Text (bot.Explain) and logs Err.
type WorkspaceError struct {
	Text string
	Err  error
}

func (e *WorkspaceError) Error() string { return fmt.Sprintf("workspace: %s: %v", e.Text, e.Err) }

// Unwrap keeps the cause matchable.
func (e *WorkspaceError) Unwrap() error { return e.Err }

// prepareWorkspace runs the Workspace for a turn, if there is one.
func (p *Pool) prepareWorkspace(ctx context.Context, r resolved, req Request) (string, error) {
	if p.ws == nil {
		return "", nil
	}
	note, err := p.ws.Prepare(ctx, r.sb, WorkspaceThread{ThreadKey: req.ThreadKey, Platform: req.Platform, ChannelID: req.ChannelID, UserID: req.UserID, UserName: req.UserName})
	if err != nil {
		return "", classify(EINVALID, "prepare the workspace", err)
	}
	return note, nil
}

// WorkspacePusher is an optional Workspace capability: deliver the thread's work from its sandbox
// (push its branch, open or update the pull request). note is the reply.
type WorkspacePusher interface {
	Push(ctx context.Context, sb sandbox.Sandbox, t WorkspaceThread) (note string, err error)
}

// ErrNoWorkspace: the thread has nothing to push (no workspace configured, or no sandbox yet).
var ErrNoWorkspace = errors.New("this thread has no workspace to push from")

// Push delivers the thread's work through the Workspace, on the thread's queue (after the turns
// already queued) and under its lock. A paused sandbox is resumed for it.
func (p *Pool) Push(ctx context.Context, threadKey string) (string, error) {
	wp, ok := p.ws.(WorkspacePusher)
	if !ok {
		return "", &Error{Code: EINVALID, Op: "push", Err: ErrNoWorkspace}
	}
	var note string
	err := p.onThread(ctx, threadKey, func(ctx context.Context, cur db.Session) error {
		if cur.SandboxID == "" || cur.Status == db.SessionDestroyed || cur.Status == db.SessionDestroying {
			return &Error{Code: EINVALID, Op: "push", Err: ErrNoWorkspace}
		}
		r, err := p.life.resolve(ctx, cur, func() {})
		if err != nil {
			return classify(ESANDBOX, "prepare sandbox", err)
		}
		if r.created {
			// The sandbox was gone: nothing unpushed survived, and the new one is filled on the
			// next turn.
			return &Error{Code: EINVALID, Op: "push", Err: ErrNoWorkspace}
		}
		note, err = wp.Push(ctx, r.sb, WorkspaceThread{ThreadKey: cur.ThreadKey, Platform: cur.Platform, ChannelID: cur.ChannelID, UserID: cur.OwnerUserID})
		if err != nil {
			return classify(EINVALID, "push", err)
		}
		return nil
	})
	if errors.Is(err, db.ErrNotFound) {
		return "", &Error{Code: EINVALID, Op: "push", Err: ErrNoWorkspace}
	}
	return note, err
}

// WorkspaceDescriber is an optional Workspace capability: a line for the thread's status (its
// repository, branch and last pushed commit), from the bot's side only (no sandbox call).
type WorkspaceDescriber interface {
	Describe(ctx context.Context, t WorkspaceThread) string
}

// DescribeWorkspace is the thread's workspace line for status ("" when there is none).
func (p *Pool) DescribeWorkspace(ctx context.Context, t WorkspaceThread) string {
	d, ok := p.ws.(WorkspaceDescriber)
	if !ok {
		return ""
	}
	return d.Describe(ctx, t)
}
