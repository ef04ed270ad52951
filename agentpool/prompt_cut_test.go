package agentpool

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestPromptCutIsInterruptedNotRetried: a runtime that lost the run after the agent got the prompt
// (runtime.ErrPromptCut, here with the sandbox going down as its cause) must not have the prompt sent
// again: the agent may have done the work. The turn ends as interrupted (EINTERRUPTED, which the bot
// words as "send retry"), recorded so that retry finds it, and the runtime is asked to stop a run
// that may live on. A prompt that failed as sandbox-down before it reached the agent is still sent
// once more, and a cut on that second prompt is interrupted too.
func TestPromptCutIsInterruptedNotRetried(t *testing.T) {
	cut := runtime.PromptCut(fmt.Errorf("opencode: the event stream ended mid-turn: %w", runtime.ErrSandboxDown))
	down := fmt.Errorf("opencode: subscribing to events: %w: connection refused", runtime.ErrSandboxDown)
	tests := []struct {
		name        string
		errs        []error
		wantPrompts int
		wantCreates int
	}{
		{"cut: one prompt", []error{cut}, 1, 1},
		{"down before it reached the agent, then cut: two prompts", []error{down, cut}, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov := sandboxfake.New()
			errs := tt.errs
			rt := &scriptRuntime{promptFunc: func(context.Context, sandbox.Sandbox, string, runtime.Prompt, func(runtime.Event)) (runtime.Result, error) {
				if len(errs) == 0 {
					return runtime.Result{Answer: "ran again"}, nil
				}
				err := errs[0]
				errs = errs[1:]
				return runtime.Result{}, err
			}}
			f := newFixture(t, newSQLiteStore(t), prov, rt)
			sink := newCollector()
			tk := submit(t, f.pool, "web:cut", "e1", "push the release", sink)
			out := sink.wait(t, 1)[0]

			require.Len(t, rt.recorded(), tt.wantPrompts, "the prompt the agent got is not sent again")
			require.Equal(t, EINTERRUPTED, ErrorCode(out.Err), "%v", out.Err)
			require.ErrorIs(t, out.Err, runtime.ErrPromptCut, "the cause is kept for the log")
			require.False(t, out.Cancelled)
			require.Empty(t, out.Answer)
			require.Equal(t, 1, rt.aborted, "a run that may live on is stopped")
			require.Equal(t, tt.wantCreates, prov.Calls("Create"))

			got, err := f.store.TurnLastFailedWith(t.Context(), "web:cut", InterruptedText)
			require.NoError(t, err, "retry finds it")
			require.Equal(t, tk.TurnID, got.ID)
			require.Equal(t, db.TurnFailed, got.Status)
		})
	}
}
