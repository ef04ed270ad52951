package gateway

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// callingRuntime makes model calls through the gateway during Prompt, as an agent would, and answers
// with what the last call returned.
type callingRuntime struct {
	runtime.Runtime
	e     *env
	t     *testing.T
	tok   string
	calls int
	usage runtime.Usage
}

func (r *callingRuntime) Prompt(ctx context.Context, _ sandbox.Sandbox, _ string, _ runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
	var last string
	for range r.calls {
		resp := r.e.do(ctx, r.t, apiCalls[0], r.tok, "hi", true)
		last = readAll(r.t, resp)
		if resp.StatusCode != http.StatusOK {
			return runtime.Result{Answer: "The model API returned an error: " + last, IsError: true, Usage: r.usage}, nil
		}
	}
	return runtime.Result{Answer: "done", Usage: r.usage}, nil
}

// TestRuntimeBudgetReply: a turn that starts over budget is refused without running; a turn whose
// call is refused midway ends refused instead of with the runtime's error text;
// a turn within budget keeps its answer, and its usage is the gateway's record, not the runtime's.
func TestRuntimeBudgetReply(t *testing.T) {
	tests := []struct {
		name   string
		spent  bool // a turn before this one used the budget up
		calls  int
		answer string
	}{
		{"within budget", false, 1, "done"},
		{"refused midway", false, 2, "model budget exhausted: the thread budget is used up (15 of 15 tokens)"},
		{"over budget before the turn", true, 1, "model budget exhausted: the thread budget is used up (15 of 15 tokens)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Budget{ThreadTokens: fakeTokens})
			fwd := filepath.Join(t.TempDir(), "fwd")
			require.NoError(t, os.WriteFile(fwd, nil, 0o755))
			e.g.cfg.Forwarder = fwd // the fake provider runs nothing; Create only needs a path
			prov := e.g.Provider(sandboxfake.New())

			gen := e.session(t, "web:c1")
			tok := Token(testSecret, "web:c1", gen)
			if tc.spent {
				id := e.turn(t, "web:c1", "U1", "ev0")
				require.NoError(t, e.store.TurnAddUsage(t.Context(), id, 10, 5, 0))
				e.finish(t, id)
			}
			turnID := e.turn(t, "web:c1", "U1", "ev1")
			h, err := prov.Create(t.Context(), sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: "web:c1", Generation: gen}})
			require.NoError(t, err)
			inner := &callingRuntime{e: e, t: t, tok: tok, calls: tc.calls, usage: runtime.Usage{InputTokens: 999}}
			res, err := e.g.Runtime(inner).Prompt(t.Context(), sandbox.Bind(prov, h), "s", runtime.Prompt{}, func(runtime.Event) {})
			require.NoError(t, err)
			require.Equal(t, tc.answer, res.Answer, "the answer is the refusal itself, not the runtime's error")
			require.Equal(t, tc.answer != "done", res.IsError)
			if tc.answer == "done" {
				require.NoError(t, res.Refusal)
			} else {
				var be *BudgetError
				require.ErrorAs(t, res.Refusal, &be, "the refusal's facts, for the bot to word")
				require.Equal(t, BudgetError{Scope: ScopeThread, Limit: fakeTokens, Used: fakeTokens}, *be)
			}
			require.Zero(t, res.Usage, "the turn's usage is what the gateway recorded")
			if tc.answer == "done" {
				require.JSONEq(t, `{"input_tokens":10,"output_tokens":5,"cost_micros":0}`, usageOf(t, e.store, turnID))
			}
		})
	}
}
