package agentpool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// settleBeforeLockStore settles one thread's session just before the pass takes its lock, as a turn
// on a replica whose clock runs behind by more than the grace would: the row is stable, its
// generation unchanged, and its update time still older than the pass's cutoff.
type settleBeforeLockStore struct {
	db.Store
	t      *testing.T
	clock  *dbtest.Clock
	thread string
	skew   time.Duration
}

func (s *settleBeforeLockStore) LockThread(ctx context.Context, key string) (func(), error) {
	if key == s.thread {
		s.thread = ""
		now := s.clock.Now()
		s.clock.Set(now.Add(-s.skew))
		_, err := s.Store.SessionTransition(ctx, key, db.Transition{From: []db.SessionStatus{db.SessionResuming}, To: db.SessionActive})
		s.clock.Set(now)
		require.NoError(s.t, err)
	}
	return s.Store.LockThread(ctx, key)
}

// TestReconcilePassLogsOnlyWhatItDid: a session found unsettled by the query and settled by the time
// the pass holds its lock is left alone, counted as skipped, and not logged as reconciled.
func TestReconcilePassLogsOnlyWhatItDid(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		prov := sandboxfake.New()
		sessionWith(t, st, prov, "web:settled", db.SessionResuming, boxRunning)
		clock.Advance(10 * time.Minute)
		ss := &settleBeforeLockStore{Store: st, t: t, clock: clock, thread: "web:settled", skew: 9 * time.Minute}
		core, logs := observer.New(zapcore.InfoLevel)
		m, err := NewMaintainer(MaintainerConfig{ReconcileGrace: 5 * time.Minute}, MaintainerDeps{
			Store: ss, Provider: prov, Deployment: "dep", Logger: zap.New(core), Now: clock.Now,
		})
		require.NoError(t, err)
		m.lockWait = time.Second

		rep, err := m.ReconcilePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 1, Skipped: 1}, rep)
		require.Equal(t, db.SessionActive, sessionStatus(t, st, "web:settled").Status)
		require.Zero(t, logs.FilterMessage("reconciled session").Len(), "nothing was reconciled")
	})
}
