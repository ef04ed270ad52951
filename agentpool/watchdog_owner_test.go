package agentpool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestWatchdogLeavesLiveOwnersTurns: the leader's watchdog ends the stuck turns of its own process
// and of dead ones, never a live other replica's: that replica runs the turn, its own watch cancels
// it, and it posts the outcome it records. Failing it here would record one end and post another.
func TestWatchdogLeavesLiveOwnersTurns(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		suffix := maintRandom()
		me, other, dead := "me-"+suffix, "other-"+suffix, "dead-"+suffix
		hold, err := st.HoldInstance(ctx, other)
		require.NoError(t, err)
		defer hold.Release()
		mine, err := st.HoldInstance(ctx, me)
		require.NoError(t, err)
		defer mine.Release()
		startTurn := func(event, owner string) db.Turn {
			tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "web:" + event, PlatformEventID: event, Prompt: "p", Owner: owner})
			require.NoError(t, err)
			tr, err = st.TurnStart(ctx, tr.ID, owner)
			require.NoError(t, err)
			return tr
		}
		ownTurn := startTurn("e-own-"+suffix, me)
		otherTurn := startTurn("e-other-"+suffix, other)
		deadTurn := startTurn("e-dead-"+suffix, dead)

		var hooked []int64
		m, err := NewMaintainer(MaintainerConfig{StuckAfter: 10 * time.Minute}, MaintainerDeps{
			Store: st, Provider: sandboxfake.New(), Deployment: "dep", Logger: zaptest.NewLogger(t),
			Now: clock.Now, Instance: me,
			OnStuck: func(_ context.Context, tr db.Turn) { hooked = append(hooked, tr.ID) },
		})
		require.NoError(t, err)
		clock.Advance(11 * time.Minute)

		rep, err := m.WatchdogPass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 3, Done: 2, Skipped: 1}, rep)
		require.ElementsMatch(t, []int64{ownTurn.ID, deadTurn.ID}, hooked)
		for id, want := range map[int64]db.TurnStatus{ownTurn.ID: db.TurnFailed, deadTurn.ID: db.TurnFailed, otherTurn.ID: db.TurnRunning} {
			got, err := st.TurnGet(ctx, id)
			require.NoError(t, err)
			require.Equal(t, want, got.Status, "turn %d", id)
		}
	})
}
