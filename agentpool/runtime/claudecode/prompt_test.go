package claudecode

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestPromptIsNeverAnOption runs the real claude CLI in the runtime image against the fake model: a
// message that looks like an option, and one larger than Linux lets one argv string be (128 KiB),
// both reach the model as the user's text.
func TestPromptIsNeverAnOption(t *testing.T) {
	p := runtimetest.Provider(t)
	bin := runtimetest.BuildFake(t)
	sb, _ := runtimetest.NewSandbox(t, p, t.Name())
	fake := runtimetest.StartFake(t, sb, bin, llmfake.Script{Default: &llmfake.Reply{Text: "seen it"}})
	rt := New(Config{BaseURL: fake.URL, APIKey: "sk-tb-prompt-test", Model: "claude-sonnet-4-5"})
	require.NoError(t, rt.Ensure(t.Context(), sb))

	for _, tc := range []struct{ name, mark, text, history string }{
		{name: "starts with a dash", mark: "TB-DASH", text: "--help -p TB-DASH: is this a flag?"},
		{name: "a lone double dash", mark: "TB-DDASH", text: "-- TB-DDASH"},
		{name: "starts with a dash after history", mark: "TB-HIST", text: "-v TB-HIST", history: "user: earlier\nassistant: ok"},
		{name: "1 MiB", mark: "TB-BIG", text: "TB-BIG " + strings.Repeat("0123456789abcdef", 1<<16)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			sid, _, err := rt.Session(ctx, sb, "", "test")
			require.NoError(t, err)
			res, err := rt.Prompt(ctx, sb, sid, runtime.Prompt{Text: tc.text, History: tc.history, Timeout: 2 * time.Minute},
				func(runtime.Event) {})
			require.NoError(t, err)
			require.False(t, res.IsError, res.Answer)
			require.Equal(t, "seen it", strings.TrimSpace(res.Answer))
			reqs, err := fake.Requests(ctx)
			require.NoError(t, err)
			var body string
			for _, r := range reqs {
				if strings.Contains(r.Prompt, tc.mark) {
					body = string(r.Body)
				}
			}
			require.NotEmpty(t, body, "the model got the message")
			require.Greater(t, len(body), len(tc.text)-1, "all of it")
		})
	}
}
