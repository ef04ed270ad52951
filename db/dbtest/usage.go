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
	require.ErrorIs(t, s.TurnAddUsage(ctx, 999999, 1, 1), db.ErrNotFound)

	// Yesterday's turn of U1 in thread k: counts for the thread, not for today.
	old, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "u0", UserID: "U1", Prompt: "p"})
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, old.ID, "")
	require.NoError(t, err)
	require.NoError(t, s.TurnAddUsage(ctx, old.ID, 100, 10))
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

	require.NoError(t, s.TurnAddUsage(ctx, running.ID, 5, 2))
	require.NoError(t, s.TurnAddUsage(ctx, running.ID, 7, 3))
	require.NoError(t, s.TurnAddUsage(ctx, other.ID, 1000, 1))
	got, err = s.TurnGet(ctx, running.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"input_tokens":12,"output_tokens":5}`, string(got.Usage))

	_, err = s.TurnFinish(ctx, running.ID, db.TurnResult{Status: db.TurnDone, Answer: "a"})
	require.NoError(t, err)
	require.NoError(t, s.TurnAddUsage(ctx, running.ID, 1, 1), "a call that ends after the turn still counts")
	got, err = s.TurnGet(ctx, running.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"input_tokens":13,"output_tokens":6}`, string(got.Usage))
	_, err = s.TurnGetRunning(ctx, "k")
	require.ErrorIs(t, err, db.ErrNotFound)

	midnight := time.Date(today.UTC().Year(), today.UTC().Month(), today.UTC().Day(), 0, 0, 0, 0, time.UTC)
	totals, err := s.TurnUsageTotals(ctx, "k", "U1", midnight)
	require.NoError(t, err)
	require.Equal(t, db.UsageTotals{Thread: 110 + 19, User: 19, All: 19 + 1001}, totals)

	totals, err = s.TurnUsageTotals(ctx, "nobody", "nobody", midnight)
	require.NoError(t, err)
	require.Equal(t, db.UsageTotals{All: 19 + 1001}, totals)
}
