package bot

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
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

			// Two more retries at once, the first's reply still being posted: each is answered (the
			// reply is recorded under its own message, not under the retried turn's event).
			slow := &gatedReplier{chatReplier: newChatReplier(), gate: make(chan struct{}), entered: make(chan struct{})}
			msg := Message{Thread: thread, ChannelID: "C", User: User{ID: "U"}, Text: "retry", EventID: "ev3",
				Reply: json.RawMessage(`{"channel":"C","thread_ts":"1.1","ts":"4.4"}`)}
			require.NoError(t, h.Handle(t.Context(), msg, slow))
			<-slow.entered
			fourth := retry("ev4", "5.5")
			fourth.waitPost(t, "That message was already retried.")
			close(slow.gate)
			slow.waitPost(t, "That message was already retried.")
			require.NoError(t, h.Wait(t.Context()))
		})
	}
}

// gatedReplier holds its posts until gate is closed; entered is closed when the first one waits.
type gatedReplier struct {
	*chatReplier
	gate    chan struct{}
	once    sync.Once
	entered chan struct{}
}

func (r *gatedReplier) Post(ctx context.Context, text string) error {
	r.once.Do(func() { close(r.entered) })
	<-r.gate
	return r.chatReplier.Post(ctx, text)
}

// TestReusedEventIDIsRefused: a message under an event id already recorded for another message
// (different text, files or thread) is not a redelivery: Handle says so with ErrEventReused instead
// of dropping it as a duplicate; the same message again is still a quiet duplicate.
func TestReusedEventIDIsRefused(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	pool, err := agentpool.New(agentpool.Config{Deployment: "reuse", Image: "img"},
		agentpool.Deps{Store: st, Provider: sandboxfake.New(), Runtime: minimalRuntime{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	h := NewHandler(HandlerConfig{}, pool, st, nil, nil)
	send := func(thread ThreadKey, text string, files ...File) (*chatReplier, error) {
		r := newChatReplier()
		msg := Message{Thread: thread, ChannelID: "c1", User: User{ID: "U"}, Text: text, EventID: "web-c1:k1", Files: files,
			Reply: json.RawMessage(`{"conversation":"c1"}`)}
		return r, h.Handle(t.Context(), msg, r)
	}
	thread := WebThread("c1")
	first, err := send(thread, "build it", File{Name: "a.txt", Size: 3, Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("abc")), nil
	}})
	require.NoError(t, err)
	first.waitPost(t, "echo: build it")
	require.NoError(t, h.Wait(t.Context()))

	for name, tc := range map[string]struct {
		thread ThreadKey
		text   string
		files  []File
		reused bool
	}{
		"the same message again": {thread, "build it", []File{{Name: "a.txt", Size: 3}}, false},
		"another text":           {thread, "build that", []File{{Name: "a.txt", Size: 3}}, true},
		"other files":            {thread, "build it", []File{{Name: "b.txt", Size: 3}}, true},
		"no files":               {thread, "build it", nil, true},
		"another thread":         {WebThread("c2"), "build it", []File{{Name: "a.txt", Size: 3}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := send(tc.thread, tc.text, tc.files...)
			require.NoError(t, h.Wait(t.Context()))
			if tc.reused {
				require.ErrorIs(t, err, ErrEventReused)
			} else {
				require.NoError(t, err)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			require.Empty(t, r.posts, "nothing run or answered")
		})
	}
}
