package agentpool

import (
	"context"
	"errors"

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
	// down holds the providers found unavailable in this pass (one pass runs on one goroutine).
	down map[string]error
}

func (m *Maintainer) newGuard(pass string) *passGuard {
	return &passGuard{m: m, pass: pass, down: map[string]error{}}
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
		if o == outFailed && errors.Is(err, sandbox.ErrUnavailable) && ctx.Err() == nil {
			g.down[name] = err
			g.m.met.ProviderDown(name, g.pass)
			g.m.log.Named(g.pass).Warn("provider unavailable: its other sessions are skipped in this pass, the other providers' are not",
				zap.String("provider", name), zap.String("thread", s.ThreadKey), zap.Error(err))
		}
		return o, err
	}
}
