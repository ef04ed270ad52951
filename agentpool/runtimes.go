package agentpool

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
)

// runtimeSet is the agent runtimes a deployment enables (runtime.enabled, default runtime.name). A
// session records its thread's choice (db.Session.Runtime); every runtime call of a turn goes to the
// runtime that session names (Pool.runtimeOf). A sandbox runs one runtime for its whole life: a
// thread that changes runtime gets a new sandbox, with its history replayed (Pool.UseRuntime).
type runtimeSet = enabledSet[runtime.Runtime]

// UnknownRuntimeError refuses a runtime the deployment does not enable; Enabled lists those it
// does, the default first. The bot words it.
type UnknownRuntimeError struct {
	Name    string
	Enabled []string
}

func (e *UnknownRuntimeError) Error() string {
	return fmt.Sprintf("agent runtime %q is not enabled here (enabled: %v)", e.Name, e.Enabled)
}

// RuntimeChange is what a thread's runtime choice did (Pool.UseRuntime). Its fields mean what they
// mean for a provider choice, with From and To naming runtimes; OldSandbox is the sandbox the old
// runtime ran in.
type RuntimeChange = ProviderChange

// Runtimes lists the agent runtimes this pool runs, the default first.
func (p *Pool) Runtimes() []string { return slices.Clone(p.rts.names) }

// DefaultRuntime is the runtime of threads that chose none.
func (p *Pool) DefaultRuntime() string { return p.rts.def.Name() }

// runtimeOf is the runtime the session's sandbox runs.
func (p *Pool) runtimeOf(s db.Session) runtime.Runtime { return p.rts.pick(s.Runtime) }

// UseRuntime makes the thread use the named runtime, from its next turn on (the in-thread "runtime"
// command). A thread without a sandbox yet just records the choice. A thread with one is moved: its
// sandbox, where the old runtime runs, is destroyed now (its files go, its history stays), and the
// next turn creates a new one for the new runtime with the history replayed. Like UseProvider it
// runs on the thread's queue under the thread's lock, and the choice is saved in the session. A
// runtime not enabled is an *UnknownRuntimeError.
func (p *Pool) UseRuntime(ctx context.Context, t WorkspaceThread, name string) (RuntimeChange, error) {
	if _, ok := p.rts.get(name); !ok {
		return RuntimeChange{}, &UnknownRuntimeError{Name: name, Enabled: p.Runtimes()}
	}
	if err := p.ensureSession(ctx, t); err != nil {
		return RuntimeChange{}, fmt.Errorf("agentpool: use runtime: %w", err)
	}
	var ch RuntimeChange
	err := p.onThread(ctx, t.ThreadKey, func(ctx context.Context, cur db.Session) (err error) {
		ch, err = p.moveRuntime(ctx, cur, name)
		return err
	})
	if err != nil {
		return ch, fmt.Errorf("agentpool: switch %s to runtime %s: %w", t.ThreadKey, name, err)
	}
	if ch.Moved {
		p.log.Info("thread moved to another runtime", zap.String("thread", t.ThreadKey), zap.String("from", ch.From),
			zap.String("to", ch.To), zap.String("old_sandbox", ch.OldSandbox))
	}
	return ch, nil
}

// ensureSession creates the thread's session row if it has none yet (a choice made before the first
// turn), with no sandbox; an existing row is left as it is.
func (p *Pool) ensureSession(ctx context.Context, t WorkspaceThread) error {
	_, _, err := p.store.SessionCreate(ctx, db.NewSession{
		ThreadKey: t.ThreadKey, Platform: t.Platform, ChannelID: t.ChannelID, OwnerUserID: t.UserID,
		Runtime: p.rts.def.Name(), Status: db.SessionDestroyed,
	})
	return err
}

// moveRuntime records that the session's sandboxes run runtime to, and destroys the sandbox it has
// (where the old runtime runs). The choice and the start of the destroy are one write: if the
// destroy fails or the process dies before it, the session is left destroying with the new choice,
// and cleanup, reconcile or the next resolve finish it; no turn of the new runtime ever runs in the
// old sandbox.
func (p *Pool) moveRuntime(ctx context.Context, cur db.Session, to string) (RuntimeChange, error) {
	from := p.runtimeOf(cur).Name()
	ch := RuntimeChange{ThreadKey: cur.ThreadKey, From: from, To: to, Replay: cur.Generation > 0}
	if from == to {
		if cur.Runtime != to {
			// The default, or a choice no longer enabled that meant it: record it, nothing moves.
			if _, err := p.store.SessionUpdate(ctx, cur.ThreadKey, db.SessionPatch{Runtime: &to}); err != nil {
				return ch, fmt.Errorf("record the runtime: %w", err)
			}
		}
		ch.Unchanged = true
		return ch, nil
	}
	h, herr := p.life.handle(cur)
	if cur.Status == db.SessionDestroyed || (herr == nil && h.IsZero()) {
		if _, err := p.store.SessionUpdate(ctx, cur.ThreadKey, db.SessionPatch{Runtime: &to}); err != nil {
			return ch, fmt.Errorf("record the runtime: %w", err)
		}
		return ch, nil
	}
	s, err := p.store.SessionTransition(ctx, cur.ThreadKey, db.Transition{
		From: liveStatuses, To: db.SessionDestroying, IfGeneration: gen(cur), Patch: db.SessionPatch{Runtime: &to},
	})
	if err != nil {
		return ch, fmt.Errorf("record the runtime: %w", err)
	}
	ch.Moved, ch.OldSandbox = true, h.ID
	if _, err := p.life.destroy(ctx, s); err != nil {
		return ch, fmt.Errorf("destroy the sandbox of runtime %s: %w", from, err)
	}
	return ch, nil
}
