package agentpool

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// switchedProvider is the fake provider behind a service that is down (Stop and List answer
// sandbox.ErrUnavailable) while off is set.
type switchedProvider struct {
	*sandboxfake.Provider
	off atomic.Bool
}

func (p *switchedProvider) unavailable(op string) error {
	if p.off.Load() {
		return fmt.Errorf("fake %s: connection refused: %w", op, sandbox.ErrUnavailable)
	}
	return nil
}

func (p *switchedProvider) Stop(ctx context.Context, h sandbox.Handle) error {
	if err := p.unavailable("stop"); err != nil {
		return err
	}
	return p.Provider.Stop(ctx, h)
}

func (p *switchedProvider) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	if err := p.unavailable("list"); err != nil {
		return nil, err
	}
	return p.Provider.List(ctx, labels)
}

// TestProviderOutageIsLoggedOnce: a provider outage failed the idle-pause and reaper passes on every
// tick, and each failing pass logged a warning per pass about the provider plus "pass done with
// failures": an outage of an hour wrote hundreds of warnings. They are now logged when the outage
// starts, and once when it ends; the passes in between log at debug.
func TestProviderOutageIsLoggedOnce(t *testing.T) {
	ctx := context.Background()
	clock := dbtest.NewClock(time.Now().UTC())
	st := dbtest.OpenSQLite(t, db.WithClock(clock.Now))
	prov := &switchedProvider{Provider: sandboxfake.New()}
	prov.SetClock(clock.Now)
	core, logs := observer.New(zapcore.DebugLevel)
	m, err := NewMaintainer(MaintainerConfig{IdleTimeout: time.Minute},
		MaintainerDeps{Store: st, Provider: prov, Deployment: "dep", Logger: zap.New(core), Now: clock.Now})
	require.NoError(t, err)
	h := fakeBox(t, prov.Provider, "dep", "web:idle")
	activeSessionFor(t, st, "web:idle", h)

	idle, reap := &passState{log: m.log.Named(passIdle)}, &passState{log: m.log.Named(passReaper)}
	round := func() {
		clock.Advance(2 * time.Minute) // idle again: a failed Stop put it back to active
		rep, err := m.IdlePass(ctx)
		idle.observe(ctx, rep, err)
		rr, err := m.ReapPass(ctx, false)
		reap.observe(ctx, rr.passReport(), err)
	}
	loud := func() []string {
		var msgs []string
		for _, e := range logs.TakeAll() {
			if e.Level >= zapcore.WarnLevel {
				msgs = append(msgs, e.LoggerName+": "+e.Message)
			}
		}
		return msgs
	}

	prov.off.Store(true)
	round()
	require.Len(t, loud(), 4, "the outage's start: the idle pass's provider and failures, the reaper's list and pass")
	for range 3 {
		round()
		require.Empty(t, loud(), "the same outage, pass after pass")
	}
	prov.off.Store(false)
	round()
	require.Empty(t, loud())
	require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:idle").Status)
}
