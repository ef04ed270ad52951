package dbtest

import (
	"encoding/json"
	"fmt"
	"math"
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

// testTurnUsageArithmetic: the sums the budgets use are the same on both engines, and input that
// would break them is refused (ErrInvalid) on both, instead of PostgreSQL failing with a raw driver
// error (bigint out of range; a fractional or string count in a finished turn's usage, which then
// broke every later TurnUsageTotals of the deployment) while SQLite silently went to floating point.
func testTurnUsageArithmetic(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	turn := func(event string) int64 {
		tr, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: event, UserID: "U", Prompt: "p"})
		require.NoError(t, err)
		_, err = s.TurnStart(ctx, tr.ID, "")
		require.NoError(t, err)
		return tr.ID
	}

	id := turn("e1")
	for _, tc := range []struct {
		name          string
		in, out, cost int64
	}{
		{"negative input", -1, 0, 0},
		{"negative output", 0, -5, 0},
		{"negative cost", 0, 0, -1},
		{"huge input", math.MaxInt64, 0, 0},
		{"huge cost", 0, 0, math.MaxInt64},
	} {
		err := s.TurnAddUsage(ctx, id, tc.in, tc.out, tc.cost)
		require.ErrorIs(t, err, db.ErrInvalid, tc.name)
	}
	got, err := s.TurnGet(ctx, id)
	require.NoError(t, err)
	require.Nil(t, got.Usage, "refused calls add nothing")

	// The largest a call may report, many times over, still sums exactly.
	for range 3 {
		require.NoError(t, s.TurnAddUsage(ctx, id, db.MaxUsagePerCall, db.MaxUsagePerCall, db.MaxUsagePerCall))
	}
	long := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	totals, err := s.TurnUsageTotals(ctx, "k", "U", long)
	require.NoError(t, err)
	require.Equal(t, 6*db.MaxUsagePerCall, totals.Thread)
	require.Equal(t, 3*db.MaxUsagePerCall, totals.AllCostMicros)

	// A finished turn's usage comes from the agent's own report: a count the budgets could not sum
	// alike (fractional, a string, negative, huge) is dropped, and the turn still finishes.
	for i, tc := range []struct{ in, want string }{
		{`{"input_tokens":1.5,"output_tokens":4}`, `{"output_tokens":4}`},
		{`{"output_tokens":"7","cost_usd":0.5}`, `{"cost_usd":0.5}`},
		{`{"cost_micros":-3}`, `{}`},
		{`{"input_tokens":1e30}`, `{}`},
		{`{"input_tokens":99999999999999999999}`, `{}`},
		{`{"output_tokens":null,"input_tokens":true}`, `{}`},
	} {
		bid := turn(fmt.Sprintf("bad-%d", i))
		got, err := s.TurnFinish(ctx, bid, db.TurnResult{Status: db.TurnDone, Answer: "kept", Usage: json.RawMessage(tc.in)})
		require.NoError(t, err, tc.in)
		require.Equal(t, "kept", got.Answer)
		require.JSONEq(t, tc.want, string(got.Usage), tc.in)
	}
	for _, bad := range []string{`[1]`, `5`, `"x"`} {
		_, err := s.TurnFinish(ctx, turn("not-object-"+bad), db.TurnResult{Status: db.TurnDone, Usage: json.RawMessage(bad)})
		require.ErrorIs(t, err, db.ErrInvalid, bad)
	}
	ok := turn("ok")
	_, err = s.TurnFinish(ctx, ok, db.TurnResult{Status: db.TurnDone,
		Usage: json.RawMessage(`{"input_tokens":2,"output_tokens":3,"cost_usd":0.25,"other":{"x":1.5}}`)})
	require.NoError(t, err)
	totals, err = s.TurnUsageTotals(ctx, "k", "U", long)
	require.NoError(t, err, "every engine can still sum the turns")
	require.Equal(t, 6*db.MaxUsagePerCall+5+4, totals.Thread)
}

// testTurnFinishKeepsCountedUsage: the agent's own usage report at the end of a turn adds its keys
// but does not replace what the model gateway counted (TurnAddUsage): the budgets sum those counts,
// and the report comes from inside the sandbox. Before, TurnFinish replaced the whole usage, so a
// runtime's report (which has no cost_micros) erased the turn's cost, and an agent reporting zero
// tokens reset its thread's and user's budgets.
func testTurnFinishKeepsCountedUsage(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	tr, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e", UserID: "U", Prompt: "p"})
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, tr.ID, "")
	require.NoError(t, err)
	require.NoError(t, s.TurnAddUsage(ctx, tr.ID, 100, 20, 3000))

	got, err := s.TurnFinish(ctx, tr.ID, db.TurnResult{Status: db.TurnDone,
		Usage: json.RawMessage(`{"input_tokens":0,"output_tokens":1,"cost_usd":0.25}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"input_tokens":100,"output_tokens":20,"cost_micros":3000,"cost_usd":0.25}`, string(got.Usage))
	totals, err := s.TurnUsageTotals(ctx, "k", "U", time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Equal(t, int64(120), totals.Thread)
	require.Equal(t, int64(3000), totals.UserCostMicros)

	// Without the gateway nothing was counted, and the report is all there is.
	tr2, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e2", UserID: "U", Prompt: "p"})
	require.NoError(t, err)
	got, err = s.TurnFinish(ctx, tr2.ID, db.TurnResult{Status: db.TurnDone, Usage: json.RawMessage(`{"input_tokens":7,"cost_usd":0.5}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"input_tokens":7,"cost_usd":0.5}`, string(got.Usage))
}

// testTurnUsageSinceZero: a zero since means since ever, on both engines. SQLite passed it as NULL,
// so its day totals and rankings were empty while PostgreSQL counted every turn.
func testTurnUsageSinceZero(t *testing.T, newStore NewStore) {
	s := newStore(t, db.WithClock(NewClock(start).Now))
	ctx := testCtx(t)
	tr, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e", UserID: "U", Prompt: "p"})
	require.NoError(t, err)
	_, err = s.TurnStart(ctx, tr.ID, "")
	require.NoError(t, err)
	require.NoError(t, s.TurnAddUsage(ctx, tr.ID, 3, 4, 5))

	totals, err := s.TurnUsageTotals(ctx, "k", "U", time.Time{})
	require.NoError(t, err)
	require.Equal(t, db.UsageTotals{Thread: 7, ThreadToday: 7, User: 7, All: 7,
		ThreadCostMicros: 5, UserCostMicros: 5, AllCostMicros: 5}, totals)
	top, err := s.TurnUsageTop(ctx, time.Time{}, 10)
	require.NoError(t, err)
	require.Equal(t, db.UsageTop{
		Threads: []db.UsageRank{{Name: "k", Tokens: 7, CostMicros: 5}},
		Users:   []db.UsageRank{{Name: "U", Tokens: 7, CostMicros: 5}},
	}, top)
}
