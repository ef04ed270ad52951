package bot

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// cutOnceRuntime loses its first run after the agent got the prompt (runtime.ErrPromptCut), and
// answers the next ones.
type cutOnceRuntime struct {
	minimalRuntime
	mu      sync.Mutex
	prompts []string
	aborted int
}

func (r *cutOnceRuntime) Prompt(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	r.mu.Lock()
	r.prompts = append(r.prompts, p.Text)
	n := len(r.prompts)
	r.mu.Unlock()
	if n == 1 {
		return runtime.Result{}, runtime.PromptCut(errors.New("the event stream ended mid-turn"))
	}
	return r.minimalRuntime.Prompt(ctx, sb, sid, p, emit)
}

func (r *cutOnceRuntime) Abort(context.Context, sandbox.Sandbox, string) error {
	r.mu.Lock()
	r.aborted++
	r.mu.Unlock()
	return nil
}

// TestCutTurnIsToldInterruptedAndRetried: a turn whose run the runtime lost after the agent got the
// prompt reaches the user as the interrupted text, which says it was not run again and how to, with
// the prompt sent once; `retry` then runs it again on purpose, once, and answers.
func TestCutTurnIsToldInterruptedAndRetried(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	rt := &cutOnceRuntime{}
	pool, err := agentpool.New(agentpool.Config{Deployment: "cutretry", Image: "img"},
		agentpool.Deps{Store: st, Provider: sandboxfake.New(), Runtime: rt})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	h := NewHandler(HandlerConfig{}, pool, st, nil, nil)
	thread := SlackThread("T", "C", "1.1")
	send := func(text, event, ts string) *chatReplier {
		r := newChatReplier()
		msg := Message{Thread: thread, ChannelID: "C", User: User{ID: "U"}, Text: text, EventID: event,
			Reply: json.RawMessage(`{"channel":"C","thread_ts":"1.1","ts":"` + ts + `"}`)}
		require.NoError(t, h.Handle(t.Context(), msg, r))
		return r
	}

	want, ok := userText(agentpool.EINTERRUPTED)
	require.True(t, ok)
	send("push the release", "ev1", "2.2").waitPost(t, want)
	require.NoError(t, h.Wait(t.Context()))
	rt.mu.Lock()
	require.Equal(t, []string{"push the release"}, rt.prompts, "not run again on its own")
	require.Equal(t, 1, rt.aborted, "a run that may live on is stopped")
	rt.mu.Unlock()

	send("retry", "ev2", "3.3").waitPost(t, "echo: push the release")
	require.NoError(t, h.Wait(t.Context()))
	rt.mu.Lock()
	require.Equal(t, []string{"push the release", "push the release"}, rt.prompts, "run again once, on purpose")
	rt.mu.Unlock()
	send("retry", "ev3", "4.4").waitPost(t, "That message was already retried.")
	require.NoError(t, h.Wait(t.Context()))
}
