package agentpool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestChatContextGoesIntoTheFirstPromptOnly: the thread's earlier messages are read when the first
// turn runs, put before the message in the prompt, and counted in the outcome; later turns, and the
// thread after a reset, do not read them again; a failure to read them leaves the turn working (and,
// as the turn answered, the thread is past its first turn).
func TestChatContextGoesIntoTheFirstPromptOnly(t *testing.T) {
	at := time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)
	cc := ChatContext{Omitted: 3, Messages: []ChatMessage{
		{Author: "ada", At: at, Text: "the build is red"},
		{Author: "ci-bot", Bot: true, At: at.Add(time.Minute), Text: "job 42 failed"},
	}}
	type step struct {
		text     string
		readErr  error
		reset    bool
		wantRead bool
		wantNote ContextNote
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first turn reads, the next does not", []step{
			{text: "fix it", wantRead: true, wantNote: ContextNote{Read: 2, Omitted: 3}},
			{text: "and again"},
		}},
		{"a reset does not read the thread again", []step{
			{text: "fix it", wantRead: true, wantNote: ContextNote{Read: 2, Omitted: 3}},
			{text: "after reset", reset: true},
		}},
		{"a failed read leaves the turn working, and the thread is past its first turn", []step{
			{text: "fix it", readErr: errors.New("missing_scope"), wantRead: true, wantNote: ContextNote{Failed: true}},
			{text: "again"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := &scriptRuntime{}
			f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
			sink := newCollector()
			for i, s := range tc.steps {
				if s.reset {
					require.NoError(t, f.pool.Reset(context.Background(), "web:c"))
				}
				var reads atomic.Int32
				_, err := f.pool.Submit(context.Background(), Request{
					ThreadKey: "web:c", Platform: "test", UserID: "u", EventID: s.text, Text: s.text, Sink: sink,
					Context: func(ctx context.Context) (ChatContext, error) {
						reads.Add(1)
						return cc, s.readErr
					},
				})
				require.NoError(t, err)
				out := sink.wait(t, 1)[0]
				require.NoError(t, out.Err, "step %d", i)
				require.Equal(t, s.wantNote, out.Context, "step %d", i)
				require.Equal(t, s.wantRead, reads.Load() == 1, "step %d: read the thread", i)
				p := rt.recorded()[i]
				require.Equal(t, s.text, p.Text, "the message itself is unchanged")
				if s.wantRead && s.readErr == nil {
					require.Contains(t, p.History, "ada, 2026-11-23 15:00 UTC:\nthe build is red")
					require.Contains(t, p.History, "ci-bot (a bot), 2026-11-23 15:01 UTC:\njob 42 failed")
					require.Contains(t, p.History, "3 more were left out")
				} else {
					require.NotContains(t, p.History, "the build is red", "step %d", i)
				}
			}
		})
	}
}

func TestWithChatContext(t *testing.T) {
	tests := []struct{ chat, history, want string }{
		{"", "", ""},
		{"c", "", "c"},
		{"", "h", "h"},
		{"c", "h", "c\n\nh"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, withChatContext(tc.chat, tc.history))
	}
}
