package opencode

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
)

// daytonaOnFake returns a Daytona provider on a fake whose sandboxes are real Docker containers of
// the runtime image. The fake fails the test if any request broke Daytona's specs.
func daytonaOnFake(t *testing.T) (*daytona.Provider, *daytonafake.Fake) {
	t.Helper()
	fake := daytonafake.New(t, daytonafake.Options{
		Backend: runtimetest.Provider(t), Snapshots: []string{runtimetest.Image()},
		Deployment: "rtdaytona-" + strings.ToLower(rand.Text()[:8]),
	})
	p, err := daytona.New(daytona.Options{APIURL: fake.APIURL(), APIKey: daytonafake.APIKey, StateTimeout: 2 * time.Minute,
		Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	return p, fake
}

// TestDaytonaConformance: the runtime conformance suite on Daytona (daytonafake on real Docker):
// opencode's server is reached only through the preview link, and its sandbox is stopped and
// started through Daytona's API.
func TestDaytonaConformance(t *testing.T) {
	runtimetest.Run(t, runtimetest.Config{New: newForFake, Process: "opencode serve --port", WrongAuth: wrongAuth,
		Provider: func(t *testing.T) sandbox.Provider { p, _ := daytonaOnFake(t); return p }})
}

// TestDaytonaTurnsThroughPreviewLink: the real opencode server in a Daytona sandbox (daytonafake,
// backed by a real Docker container with network none) is reached only through the port's preview
// link and its token. A turn runs; the token then expires, as Daytona's do, between turns and then
// in the middle of one (at its first event), and the thread's turns still run, in the same opencode
// session, over links fetched again.
func TestDaytonaTurnsThroughPreviewLink(t *testing.T) {
	p, fake := daytonaOnFake(t)
	ctx := t.Context()
	h, err := p.Create(ctx, sandbox.Spec{
		Image: runtimetest.Image(), Network: sandbox.NetworkNone,
		Labels: sandbox.Labels{Deployment: "rtdaytona", Thread: "test:" + t.Name(), Generation: 1},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	sb := sandbox.Bind(p, h)

	// The scripted model runs on the sandbox's loopback; the test drives it through the preview
	// link too.
	model := runtimetest.StartFake(t, sb, runtimetest.BuildFake(t), llmfake.Script{
		Rules: []llmfake.Rule{
			{PromptContains: "TB-ONE", Reply: llmfake.Reply{Text: "first answer"}},
			{PromptContains: "TB-TWO", Reply: llmfake.Reply{Text: "second answer"}},
			{PromptContains: "TB-THREE", Reply: llmfake.Reply{Text: "third answer"}},
		},
		Default: &llmfake.Reply{Text: "a side call"},
	})
	rt := newForFake(t, runtimetest.Model{URL: model.URL, APIKey: "sk-tb-" + rand.Text()[:16]})
	const title = "web:daytona-preview"
	turn := func(text string, onEvent func()) runtime.Result {
		t.Helper()
		require.NoError(t, rt.Ensure(ctx, sb))
		sid, _, err := rt.Session(ctx, sb, "", title)
		require.NoError(t, err)
		tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := rt.Prompt(tctx, sb, sid, runtime.Prompt{Text: text, Timeout: 2 * time.Minute}, func(runtime.Event) { onEvent() })
		require.NoError(t, err)
		require.False(t, res.IsError, res.Answer)
		return res
	}

	nothing := func() {}
	require.Equal(t, "first answer", strings.TrimSpace(turn("Hello. TB-ONE", nothing).Answer))
	sid, _, err := rt.Session(ctx, sb, "", title)
	require.NoError(t, err)
	links := fake.Calls("getPortPreviewUrl")
	require.Positive(t, links, "opencode was reached through a preview link")

	fake.ExpirePreviewToken(h.ID)
	require.Equal(t, "second answer", strings.TrimSpace(turn("And again. TB-TWO", nothing).Answer))
	require.Greater(t, fake.Calls("getPortPreviewUrl"), links, "the expired links were fetched again")

	// Mid-turn: the event stream already open carries on; the calls after it (the answer is read
	// once the session is idle) meet the expired token.
	links = fake.Calls("getPortPreviewUrl")
	var expire sync.Once
	require.Equal(t, "third answer", strings.TrimSpace(turn("Once more. TB-THREE", func() {
		expire.Do(func() { fake.ExpirePreviewToken(h.ID) })
	}).Answer))
	require.Greater(t, fake.Calls("getPortPreviewUrl"), links, "the link expired mid-turn was fetched again")
	again, _, err := rt.Session(ctx, sb, "", title)
	require.NoError(t, err)
	require.Equal(t, sid, again, "one opencode session for the whole thread")

	reqs, err := model.Requests(ctx)
	require.NoError(t, err)
	var second bool
	for _, r := range reqs {
		if strings.Contains(r.Prompt, "TB-TWO") {
			second = true
			require.Contains(t, string(r.Body), "first answer", "the second turn's model call carries the first turn")
		}
	}
	require.True(t, second, "the second turn reached the model")
}
