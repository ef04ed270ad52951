package agentpool

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestTakeOverRestoredSinkPanic: a new message in a thread a dead process owned first runs that
// process's queued turn, with the request Deps.Restore rebuilt (the bot's sink). A panic in that
// sink's Deliver unwound the new turn's job: the new message was never run nor answered (until the
// adoption pass, much later), the dead owner's turn stayed reserved here, and the running gauge
// never came down. The restored sink is now guarded like a submitted one: its panic is a failed
// post, and the new turn runs and is answered.
func TestTakeOverRestoredSinkPanic(t *testing.T) {
	st := newSQLiteStore(t)
	ctx := t.Context()
	old, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e1", UserID: "u", Prompt: "old",
		Delivery: json.RawMessage(`{}`), Owner: "dead"})
	require.NoError(t, err)

	restored := &panickySink{collector: newCollector()}
	restored.deliver.Store(true)
	p, err := New(Config{Deployment: "test-takeover-panic", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{},
		Restore: func(_ context.Context, t db.Turn) (Request, error) {
			return Request{Platform: "test", ChannelID: "c", UserID: t.UserID, Text: t.Prompt, Sink: restored}, nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	sink := newCollector()
	tk := submit(t, p, "k", "e2", "new", sink)
	require.NoError(t, p.q.wait(ctx))

	require.Len(t, sink.outcomes, 1, "the new message is answered")
	require.Equal(t, "echo: new", sink.outcomes[0].Answer)
	for _, id := range []int64{old.ID, tk.TurnID} {
		tr, err := st.TurnGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, db.TurnDone, tr.Status, "turn %d", id)
	}
	p.ownMu.Lock()
	require.Empty(t, p.own.turns, "nothing stays reserved")
	p.ownMu.Unlock()
}

// TestTakeOverQueuedTurnCountsInFlight: a dead process's queued turn that a new turn of its thread
// runs first was counted finished (Metrics.TurnFinished) but never started, so the turns-in-flight
// gauge went one lower for each, for good. It is now counted started when it is taken off the dead
// process's queue, and the gauges come back to zero.
func TestTakeOverQueuedTurnCountsInFlight(t *testing.T) {
	st := newSQLiteStore(t)
	ctx := t.Context()
	_, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e1", UserID: "u", Prompt: "old",
		Delivery: json.RawMessage(`{}`), Owner: "dead"})
	require.NoError(t, err)
	sink := newCollector()
	met := newRecordingMetrics()
	p, err := New(Config{Deployment: "test-takeover-gauge", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Metrics: met,
		Restore: func(_ context.Context, t db.Turn) (Request, error) {
			return Request{Platform: "test", ChannelID: "c", UserID: t.UserID, Text: t.Prompt, Sink: sink}, nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	submit(t, p, "k", "e2", "new", sink)
	require.NoError(t, p.q.wait(ctx))
	require.Len(t, sink.outcomes, 2)
	require.Equal(t, 2, met.get("turn."+TurnOutcomeDone))
	requireGaugesZero(t, met)
}

// requireGaugesZero checks that the queued gauge and the turns in flight (started, not finished)
// are back to zero.
func requireGaugesZero(t *testing.T, m *recordingMetrics) {
	t.Helper()
	m.mu.Lock()
	queued := m.queued
	m.mu.Unlock()
	require.Zero(t, queued, "queued gauge")
	inFlight := m.get("turn.started")
	for _, o := range []string{TurnOutcomeDone, TurnOutcomeFailed, TurnOutcomeCancelled, TurnOutcomeTakenOver, TurnOutcomeLeftQueued} {
		inFlight -= m.get("turn." + o)
	}
	require.Zero(t, inFlight, "turns in flight")
}
