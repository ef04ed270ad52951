package bot

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestRetryRedeliveredIsNotToldItWasRetried: the `retry` message itself is not recorded (its turn is
// recorded as retry:<interrupted turn>), so when the platform delivers it again (its dedupe missed:
// Redis down, or past its window) the turn is a duplicate. That message was answered: it gets no
// second reply. Another `retry` of the same turn is told it was retried already. On PostgreSQL the
// recorded reply address comes back from jsonb with its keys reordered.
func TestRetryRedeliveredIsNotToldItWasRetried(t *testing.T) {
	for name, open := range map[string]func(testing.TB, ...db.Option) db.Store{
		"sqlite": dbtest.OpenSQLite, "postgres": dbtest.OpenPostgres,
	} {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			pool, err := agentpool.New(agentpool.Config{Deployment: "retrydup", Image: "img"},
				agentpool.Deps{Store: st, Provider: sandboxfake.New(), Runtime: minimalRuntime{}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
			h := NewHandler(HandlerConfig{}, pool, st, nil, nil)
			thread := SlackThread("T", "C", "1.1")

			// A turn a restart interrupted.
			tr, err := st.TurnInsert(t.Context(), db.NewTurn{ThreadKey: thread.String(), PlatformEventID: "ev0", UserID: "U", Prompt: "build it"})
			require.NoError(t, err)
			_, err = st.TurnStart(t.Context(), tr.ID, "")
			require.NoError(t, err)
			_, err = st.TurnFinish(t.Context(), tr.ID, db.TurnResult{Status: db.TurnFailed, Error: agentpool.InterruptedText})
			require.NoError(t, err)

			retry := func(event, ts string) *chatReplier {
				r := newChatReplier()
				msg := Message{Thread: thread, ChannelID: "C", User: User{ID: "U"}, Text: "retry", EventID: event,
					Reply: json.RawMessage(`{"channel":"C","thread_ts":"1.1","ts":"` + ts + `"}`)}
				require.NoError(t, h.Handle(t.Context(), msg, r))
				return r
			}
			first := retry("ev1", "2.2")
			first.waitPost(t, "echo: build it")
			require.NoError(t, h.Wait(t.Context()))

			again := retry("ev1", "2.2") // the same message, delivered again
			require.NoError(t, h.Wait(t.Context()))
			again.mu.Lock()
			require.Empty(t, again.posts, "the retry was answered already")
			again.mu.Unlock()

			other := retry("ev2", "3.3")
			other.waitPost(t, "That message was already retried.")
			require.NoError(t, h.Wait(t.Context()))
		})
	}
}
