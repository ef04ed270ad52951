package agentpool

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// enabledSet is what a deployment enables of one kind, by name, one of them the default: the sandbox
// providers (sandbox.providers, default sandbox.provider) and the agent runtimes (runtime.enabled,
// default runtime.name). A session records its thread's choice of each (db.Session.Provider,
// db.Session.Runtime); an empty choice, as in rows older than the choice, or one the deployment no
// longer enables, means the default.
type enabledSet[T interface {
	comparable
	Name() string
}] struct {
	def    T
	byName map[string]T
	// names are the enabled ones, the default first, then in the order given.
	names []string
}

// newEnabledSet builds the set from the default and the further enabled ones (which may name the
// default again). Two different ones with one name are refused; what names the error ("Provider").
func newEnabledSet[T interface {
	comparable
	Name() string
}](what string, def T, more []T) (*enabledSet[T], error) {
	var zero T
	if def == zero {
		return nil, fmt.Errorf("agentpool: a default %s is required", what)
	}
	s := &enabledSet[T]{def: def, byName: map[string]T{def.Name(): def}, names: []string{def.Name()}}
	for _, p := range more {
		if p == zero {
			return nil, fmt.Errorf("agentpool: %ss holds a nil %s", what, what)
		}
		if have, ok := s.byName[p.Name()]; ok {
			if have != p {
				return nil, fmt.Errorf("agentpool: two %ss are named %q", strings.ToLower(what), p.Name())
			}
			continue
		}
		s.byName[p.Name()] = p
		s.names = append(s.names, p.Name())
	}
	return s, nil
}

// get returns the enabled one of that name.
func (s *enabledSet[T]) get(name string) (T, bool) {
	p, ok := s.byName[name]
	return p, ok
}

// pick is the one a session's recorded choice means: that one if enabled, else the default.
func (s *enabledSet[T]) pick(name string) T {
	if p, ok := s.byName[name]; ok {
		return p
	}
	return s.def
}

// all lists the enabled ones, the default first.
func (s *enabledSet[T]) all() []T {
	out := make([]T, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
}

// providerSet is the enabled sandbox providers. Every call about an existing sandbox goes to the
// provider its handle names, and every create to the session's: so a thread moved to another
// provider, or a move cut short by a crash, is finished by the next resolve (lifecycle.resolve).
type providerSet = enabledSet[sandbox.Provider]

func newProviderSet(def sandbox.Provider, more []sandbox.Provider) (*providerSet, error) {
	return newEnabledSet("Provider", def, more)
}

// UnknownProviderError refuses a provider the deployment does not enable; Enabled lists those it
// does, the default first. The bot words it.
type UnknownProviderError struct {
	Name    string
	Enabled []string
}

func (e *UnknownProviderError) Error() string {
	return fmt.Sprintf("sandbox provider %q is not enabled here (enabled: %v)", e.Name, e.Enabled)
}

// ProviderChange is what a thread's provider choice did (Pool.UseProvider, Pool.MoveProvider).
type ProviderChange struct {
	ThreadKey string
	// From is the provider the thread used before (the default for a thread that chose none).
	From, To string
	// Unchanged: the thread already used To; nothing was done.
	Unchanged bool
	// Moved: the thread had had a sandbox (on From), which was destroyed: the next turn creates one on
	// To and replays the thread's history into it. False when the thread had never had one (the
	// choice made before its first turn).
	Moved bool
	// OldSandbox is the destroyed sandbox's id, when Moved.
	OldSandbox string
	// Replay: the thread has had a sandbox before, so its next one gets the history replayed.
	Replay bool
}

// Providers lists the sandbox providers this pool runs, the default first.
func (p *Pool) Providers() []string { return slices.Clone(p.provs.names) }

// DefaultProvider is the provider of threads that chose none.
func (p *Pool) DefaultProvider() string { return p.provs.def.Name() }

// UseProvider makes the thread use the named provider, from its next turn on (the in-thread "use"
// command). A thread without a sandbox yet just records the choice. A thread with one on another
// provider is moved: its sandbox is destroyed now (as Destroy does, so its files go, but not its
// history), and the next turn creates one on the new provider with the history replayed. It runs on
// the thread's queue, after the turns queued before it, under the thread's lock; the choice is saved
// in the session, so it survives a restart. A provider not enabled is an *UnknownProviderError.
func (p *Pool) UseProvider(ctx context.Context, t WorkspaceThread, name string) (ProviderChange, error) {
	if _, ok := p.provs.get(name); !ok {
		return ProviderChange{}, &UnknownProviderError{Name: name, Enabled: p.Providers()}
	}
	// The row may not exist yet (the choice comes before the first turn): create it, with no sandbox.
	if err := p.ensureSession(ctx, t); err != nil {
		return ProviderChange{}, fmt.Errorf("agentpool: use provider: %w", err)
	}
	return p.MoveProvider(ctx, t.ThreadKey, name)
}

// MoveProvider is UseProvider for a thread that already has a session (the admin "move" command): a
// thread unknown to the store is db.ErrNotFound.
func (p *Pool) MoveProvider(ctx context.Context, threadKey, name string) (ProviderChange, error) {
	if _, ok := p.provs.get(name); !ok {
		return ProviderChange{}, &UnknownProviderError{Name: name, Enabled: p.Providers()}
	}
	var ch ProviderChange
	err := p.onThread(ctx, threadKey, func(ctx context.Context, cur db.Session) (err error) {
		ch, err = p.life.move(ctx, cur, name)
		return err
	})
	if err != nil {
		return ch, fmt.Errorf("agentpool: move %s to %s: %w", threadKey, name, err)
	}
	if ch.Moved {
		p.log.Info("thread moved to another provider", zap.String("thread", threadKey), zap.String("from", ch.From),
			zap.String("to", ch.To), zap.String("old_sandbox", ch.OldSandbox))
	}
	return ch, nil
}

// move records that the session's next sandbox is made on provider to, and destroys the sandbox it
// has on another provider. The choice is written first: if the destroy fails (the old provider is
// down) or the process dies before it, the session is left destroying, or live with a handle on the
// old provider, and cleanup, reconcile or the next resolve finish the move.
func (l *lifecycle) move(ctx context.Context, cur db.Session, to string) (ProviderChange, error) {
	from := l.provs.pick(cur.Provider).Name()
	ch := ProviderChange{ThreadKey: cur.ThreadKey, From: from, To: to, Replay: cur.Generation > 0}
	h, herr := l.handle(cur)
	onOld := herr == nil && !h.IsZero() && cur.Status != db.SessionDestroyed && h.Provider != to
	if from == to && !onOld {
		ch.Unchanged = true
		return ch, nil
	}
	s, err := l.store.SessionUpdate(ctx, cur.ThreadKey, db.SessionPatch{Provider: &to})
	if err != nil {
		return ch, fmt.Errorf("record the provider: %w", err)
	}
	if !onOld {
		return ch, nil
	}
	ch.From, ch.Moved, ch.OldSandbox = h.Provider, true, h.ID
	// No waiting out an outage of the old provider: moving off it may be the point. A failed destroy
	// leaves the session destroying, for cleanup and the next resolve to finish.
	now := *l
	now.providerWait = 0
	if _, err := now.destroy(ctx, s); err != nil {
		return ch, fmt.Errorf("destroy the sandbox on %s: %w", h.Provider, err)
	}
	return ch, nil
}
