package agentpool

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// providerSet is the sandbox providers a deployment enables (sandbox.providers), one of them the
// default (sandbox.provider). A session records the provider its thread uses (db.Session.Provider;
// empty, as in rows older than the registry, means the default); its sandbox's handle names the
// provider that sandbox lives on. Every call about an existing sandbox goes to the handle's provider,
// and every create to the session's: so a thread moved to another provider, or a move cut short by a
// crash, is finished by the next resolve (lifecycle.resolve).
type providerSet struct {
	def    sandbox.Provider
	byName map[string]sandbox.Provider
	// names are the enabled providers, the default first, then in the order given.
	names []string
}

// newProviderSet builds the set from the default and the further enabled providers (which may name
// the default again). Two different providers with one name are refused.
func newProviderSet(def sandbox.Provider, more []sandbox.Provider) (*providerSet, error) {
	if def == nil {
		return nil, errors.New("agentpool: a default Provider is required")
	}
	s := &providerSet{def: def, byName: map[string]sandbox.Provider{def.Name(): def}, names: []string{def.Name()}}
	for _, p := range more {
		if p == nil {
			return nil, errors.New("agentpool: Providers holds a nil provider")
		}
		if have, ok := s.byName[p.Name()]; ok {
			if have != p {
				return nil, fmt.Errorf("agentpool: two providers are named %q", p.Name())
			}
			continue
		}
		s.byName[p.Name()] = p
		s.names = append(s.names, p.Name())
	}
	return s, nil
}

// get returns the enabled provider of that name.
func (s *providerSet) get(name string) (sandbox.Provider, bool) {
	p, ok := s.byName[name]
	return p, ok
}

// wanted is the provider the session's next sandbox is created on: the one it records if that is
// enabled, else the default (an empty column, or a provider the deployment no longer enables).
func (s *providerSet) wanted(sess db.Session) sandbox.Provider {
	if p, ok := s.byName[sess.Provider]; ok {
		return p
	}
	return s.def
}

// all lists the enabled providers, the default first.
func (s *providerSet) all() []sandbox.Provider {
	out := make([]sandbox.Provider, len(s.names))
	for i, n := range s.names {
		out[i] = s.byName[n]
	}
	return out
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
	_, _, err := p.store.SessionCreate(ctx, db.NewSession{
		ThreadKey: t.ThreadKey, Platform: t.Platform, ChannelID: t.ChannelID, OwnerUserID: t.UserID,
		Runtime: p.rt.Name(), Status: db.SessionDestroyed,
	})
	if err != nil {
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
	from := l.provs.wanted(cur).Name()
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
