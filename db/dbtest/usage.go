package dbtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// testTurnUsage: the model gateway finds the running turn, adds each call's tokens to it atomically
// (also after it finished, without TurnFinish overwriting them), and sums usage for its budgets.
func testTurnUsage(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)

	_, err := s.TurnGetRunning(ctx, "k")
	require.ErrorIs(t, err, db.ErrNotFound)
	require.ErrorIs(t, s.TurnAddUsage(ctx, 999999, 1, 1, 0), db.ErrNotFound)

	// Yesterday's turn of U1 in thread k: counts for the thread, not for today.
	old, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "u0", UserID: "U1", Prompt: "p"})
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, old.ID, "")
	require.NoError(t, err)
	require.NoError(t, s.TurnAddUsage(ctx, old.ID, 100, 10, 500))
	_, err = s.TurnFinish(ctx, old.ID, db.TurnResult{Status: db.TurnDone})
	require.NoError(t, err)

	today := clock.Advance(24 * time.Hour)
	running, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "u1", UserID: "U1", Prompt: "p"})
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, running.ID, "")
	require.NoError(t, err)
	other, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k2", PlatformEventID: "u2", UserID: "U2", Prompt: "p"})
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, other.ID, "")
	require.NoError(t, err)

	got, err := s.TurnGetRunning(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, running.ID, got.ID)

	require.NoError(t, s.TurnAddUsage(ctx, running.ID, 5, 2, 20))
	require.NoError(t, s.TurnAddUsage(ctx, running.ID, 7, 3, 30))
	require.NoError(t, s.TurnAddUsage(ctx, other.ID, 1000, 1, 4000))
	got, err = s.TurnGet(ctx, running.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"input_tokens":12,"output_tokens":5,"cost_micros":50}`, string(got.Usage))

	_, err = s.TurnFinish(ctx, running.ID, db.TurnResult{Status: db.TurnDone, Answer: "a"})
	require.NoError(t, err)
	require.NoError(t, s.TurnAddUsage(ctx, running.ID, 1, 1, 0), "a call that ends after the turn still counts")
	got, err = s.TurnGet(ctx, running.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"input_tokens":13,"output_tokens":6,"cost_micros":50}`, string(got.Usage))
	_, err = s.TurnGetRunning(ctx, "k")
	require.ErrorIs(t, err, db.ErrNotFound)

	midnight := time.Date(today.UTC().Year(), today.UTC().Month(), today.UTC().Day(), 0, 0, 0, 0, time.UTC)
	totals, err := s.TurnUsageTotals(ctx, "k", "U1", midnight)
	require.NoError(t, err)
	require.Equal(t, db.UsageTotals{Thread: 110 + 19, ThreadToday: 19, User: 19, All: 19 + 1001,
		ThreadCostMicros: 550, UserCostMicros: 50, AllCostMicros: 4050}, totals)

	totals, err = s.TurnUsageTotals(ctx, "nobody", "nobody", midnight)
	require.NoError(t, err)
	require.Equal(t, db.UsageTotals{All: 19 + 1001, AllCostMicros: 4050}, totals)

	// Today's ranking: yesterday's turn is out; turns without usage are not listed; a user is named
	// platform:user_id when the thread key has a platform.
	_, err = s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k3", PlatformEventID: "u3", UserID: "U3", Prompt: "p"})
	require.NoError(t, err)
	web, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "web:x", PlatformEventID: "u4", UserID: "local", Prompt: "p"})
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, web.ID, "")
	require.NoError(t, err)
	require.NoError(t, s.TurnAddUsage(ctx, web.ID, 2, 1, 0))
	top, err := s.TurnUsageTop(ctx, midnight, 10)
	require.NoError(t, err)
	require.Equal(t, db.UsageTop{
		Threads: []db.UsageRank{{Name: "k2", Tokens: 1001, CostMicros: 4000}, {Name: "k", Tokens: 19, CostMicros: 50}, {Name: "web:x", Tokens: 3}},
		Users:   []db.UsageRank{{Name: "U2", Tokens: 1001, CostMicros: 4000}, {Name: "U1", Tokens: 19, CostMicros: 50}, {Name: "web:local", Tokens: 3}},
	}, top)
	top, err = s.TurnUsageTop(ctx, midnight, 1)
	require.NoError(t, err)
	require.Equal(t, []db.UsageRank{{Name: "k2", Tokens: 1001, CostMicros: 4000}}, top.Threads, "limited")
}
