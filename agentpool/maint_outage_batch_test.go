package agentpool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestPassesReachPastADownProvidersBatch: the idle and cleanup queries are not paged, so the
// sessions a pass skips stay at the head of every batch. With a provider down, more of its sessions
// than one batch holds, oldest first, hid every other provider's: their idle sandboxes ran, and their
// expired paused ones were kept, for as long as the outage lasted. A pass asks for more rows as it
// skips them.
func TestPassesReachPastADownProvidersBatch(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		down, up := sandboxfake.NewNamed("down"), sandboxfake.NewNamed("up")
		m, err := NewMaintainer(MaintainerConfig{IdleTimeout: 15 * time.Minute, PausedTTL: time.Hour, BatchSize: 2},
			MaintainerDeps{Store: st, Provider: down, Providers: []sandbox.Provider{up}, Deployment: "dep",
				Logger: zaptest.NewLogger(t), Now: clock.Now})
		require.NoError(t, err)
		m.lockWait = 20 * time.Millisecond

		paused := func(th string, h sandbox.Handle) {
			activeSessionFor(t, st, th, h)
			_, err := st.SessionTransition(ctx, th, db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionPaused})
			require.NoError(t, err)
		}
		for i := range 4 {
			th := fmt.Sprint("web:down-", i)
			activeSessionFor(t, st, th, fakeBox(t, down, "dep", th))
			th = fmt.Sprint("web:down-paused-", i)
			paused(th, fakeBox(t, down, "dep", th))
		}
		clock.Advance(time.Minute)
		upBox := fakeBox(t, up, "dep", "web:up")
		activeSessionFor(t, st, "web:up", upBox)
		upPaused := fakeBox(t, up, "dep", "web:up-paused")
		paused("web:up-paused", upPaused)
		clock.Advance(2 * time.Hour)

		unavailable := fmt.Errorf("engine down: %w", sandbox.ErrUnavailable)
		down.FailNext("Stop", unavailable)
		_, err = m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:up").Status, "the other provider's idle sandbox is paused")
		require.Equal(t, sandbox.StateStopped, up.Box(upBox.ID).State)

		down.FailNext("Destroy", unavailable)
		_, err = m.CleanupPass(ctx)
		require.NoError(t, err)
		require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:up-paused").Status, "the other provider's expired sandbox is destroyed")
		require.Nil(t, up.Box(upPaused.ID))
	})
}
