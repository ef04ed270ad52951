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
