package agentpool

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// passGuard keeps one provider's outage from stopping a pass for the others. The session passes
// (idle-pause, cleanup, reconcile) walk sessions of every provider mixed; once a provider answers
// one of them with sandbox.ErrUnavailable (its service down, or answering 5xx past its retries), the
// pass skips that provider's other sessions: each would only spend the pass's time budget waiting on
// the same outage. They are left as they are, and the next pass tries them again.
type passGuard struct {
	m    *Maintainer
	pass string
	// down holds the providers found unavailable in this pass (one pass runs on one goroutine), up
	// those that answered.
	down map[string]error
	up   map[string]bool
}

func (m *Maintainer) newGuard(pass string) *passGuard {
	return &passGuard{m: m, pass: pass, down: map[string]error{}, up: map[string]bool{}}
}

// sandboxProvider names the provider a session's sandbox is on: its handle's, or (no usable
// handle) the one it would be created on.
func (m *Maintainer) sandboxProvider(s db.Session) string {
	if h, err := m.life.handle(s); err == nil && !h.IsZero() {
		return h.Provider
	}
	return m.provs.pick(s.Provider).Name()
}

// wrap guards one pass's item handler.
func (g *passGuard) wrap(handle func(context.Context, db.Session) (itemOutcome, error)) func(context.Context, db.Session) (itemOutcome, error) {
	return func(ctx context.Context, s db.Session) (itemOutcome, error) {
		name := g.m.sandboxProvider(s)
		if g.down[name] != nil {
			return outSkipped, nil
		}
		o, err := handle(ctx, s)
		switch {
		case o == outFailed && errors.Is(err, sandbox.ErrUnavailable) && ctx.Err() == nil:
			g.down[name] = err
			g.m.met.ProviderDown(name, g.pass)
			log := g.m.log.Named(g.pass).Debug
			if g.m.outage.begin(g.pass, name) {
				log = g.m.log.Named(g.pass).Warn // once per outage, not once per pass
			}
			log("provider unavailable: its other sessions are skipped in this pass, the other providers' are not",
				zap.String("provider", name), zap.String("thread", s.ThreadKey), zap.Error(err))
		case o != outSkipped:
			g.up[name] = true
		}
		return o, err
	}
}

// finish records, at the end of the pass, which providers answered it: an outage logged before
// is over for them.
func (g *passGuard) finish() {
	for name := range g.up {
		if g.down[name] == nil && g.m.outage.end(g.pass, name) {
			g.m.log.Named(g.pass).Info("provider available again", zap.String("provider", name))
		}
	}
}

// outages remembers, across passes, which provider each pass found unavailable, so that an outage
// is logged when it starts and when it ends rather than on every pass (every Interval) in between.
// ReapPass also runs from the admin command, so it is guarded by a mutex.
type outages struct {
	mu   sync.Mutex
	down map[string]bool // pass + "/" + provider
}

// begin marks the provider down in pass and reports whether it was up until now.
func (o *outages) begin(pass, provider string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down == nil {
		o.down = map[string]bool{}
	}
	k := pass + "/" + provider
	first := !o.down[k]
	o.down[k] = true
	return first
}

// end marks the provider up in pass and reports whether it was down until now.
func (o *outages) end(pass, provider string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := pass + "/" + provider
	was := o.down[k]
	delete(o.down, k)
	return was
}
