package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/claudecode"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// publicEnv is env with the gateway's public handler served the way the bot serves it: under
// PublicPath, behind a server of its own (no socket, so no connection identity).
func publicEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, Budget{})
	mux := http.NewServeMux()
	mux.Handle(PublicPath+"/", http.StripPrefix(PublicPath, e.g.PublicHandler()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.g.cfg.PublicURL = srv.URL + PublicPath + "/"
	e.g.Cloud(sandboxfake.NewNamed("daytona"))
	return e, srv.URL + PublicPath
}

// TestPublicEndpointAuthorizes: over the public URL, only the current generation's token of a
// cloud sandbox's thread with a running turn passes, in either header an SDK uses; its usage goes to that thread's
// turn and to no other.
func TestPublicEndpointAuthorizes(t *testing.T) {
	e, base := publicEnv(t)
	genA := e.sessionOn(t, "slack:T1:C1:1.1", "daytona")
	e.sessionOn(t, "slack:T1:C1:2.2", "daytona")
	turnA := e.turn(t, "slack:T1:C1:1.1", "U1", "evA")
	turnB := e.turn(t, "slack:T1:C1:2.2", "U2", "evB")
	// The other thread's sandbox is recreated: its generation 1 token is revoked.
	genB := e.sessionOn(t, "slack:T1:C1:2.2", "daytona")
	// A Docker sandbox's thread, with a turn running: its token is good on its socket only.
	genD := e.session(t, "slack:T1:C1:4.4")
	e.turn(t, "slack:T1:C1:4.4", "U3", "evD")
	require.Equal(t, int64(2), genB)

	tests := []struct {
		name   string
		tok    string
		status int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"token of another secret", Token("another-secret-0123456789abcdef0123", "slack:T1:C1:1.1", genA), http.StatusUnauthorized},
		{"tampered token", Token(testSecret, "slack:T1:C1:1.1", genA) + "x", http.StatusUnauthorized},
		{"older generation", Token(testSecret, "slack:T1:C1:2.2", genB-1), http.StatusUnauthorized},
		{"the real key", anthropicKey, http.StatusUnauthorized},
		{"a Docker sandbox's token", Token(testSecret, "slack:T1:C1:4.4", genD), http.StatusUnauthorized},
		{"current token", Token(testSecret, "slack:T1:C1:1.1", genA), http.StatusOK},
	}
	for _, c := range apiCalls {
		for _, tc := range tests {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				pe := *e
				pe.url = base
				resp := pe.do(t.Context(), t, c, tc.tok, "hi", false)
				body := readAll(t, resp)
				require.Equal(t, tc.status, resp.StatusCode, body)
				require.NotContains(t, body, anthropicKey)
				require.NotContains(t, body, openAIKey)
			})
		}
	}
	// Three current-token calls of 15 tokens each, all on thread A's turn; none on B's.
	require.JSONEq(t, fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"cost_micros":0}`, 3*10, 3*5), usageOf(t, e.store, turnA))
	tr, err := e.store.TurnGet(t.Context(), turnB)
	require.NoError(t, err)
	require.NotContains(t, string(tr.Usage), "input_tokens", "thread B's turn got no usage")
	require.Equal(t, len(apiCalls), len(e.fake.Requests()), "only the authorized calls reached the upstream")
}

// TestCloudSandboxRuntime: claude-code, configured for the gateway (the forwarder's address and the
// placeholder key), runs a turn on a "daytona" sandbox: its process gets the public URL and the
// sandbox's own token, its model call goes through the public endpoint and is recorded on the
// thread's turn, and the real key appears nowhere the sandbox sees.
func TestCloudSandboxRuntime(t *testing.T) {
	e, base := publicEnv(t)
	prov := sandboxfake.NewNamed("daytona")
	e.g.Cloud(prov)
	thread := "slack:T1:C9:3.3"
	gen := e.sessionOn(t, thread, "daytona")
	turnID := e.turn(t, thread, "U1", "ev1")

	var mu sync.Mutex
	var seen []sandbox.ExecRequest
	prov.Exec_ = func(ctx context.Context, _ *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		mu.Lock()
		seen = append(seen, req)
		mu.Unlock()
		url, key := req.Env["ANTHROPIC_BASE_URL"], req.Env["ANTHROPIC_API_KEY"]
		if url == "" {
			return sandbox.ExecResult{}, nil // Ensure's and Session's checks
		}
		// This is "claude": one model call with what it was given, then its result line.
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			return sandbox.ExecResult{}, err
		}
		hreq.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			return sandbox.ExecResult{}, err
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		line, _ := json.Marshal(map[string]any{"type": "result", "subtype": "success", "is_error": resp.StatusCode != 200,
			"result": fmt.Sprintf("status %d: %s", resp.StatusCode, b), "session_id": "00000000-0000-4000-8000-000000000001"})
		_, _ = fmt.Fprintf(req.Stdout, "%s\n", line)
		return sandbox.ExecResult{}, nil
	}
	h, err := prov.Create(t.Context(), sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: thread, Generation: gen}})
	require.NoError(t, err)
	sb := sandbox.Bind(prov, h)

	rt := e.g.Runtime(claudecode.New(claudecode.Config{BaseURL: e.g.LocalURL() + AnthropicPath, APIKey: PlaceholderKey}))
	require.NoError(t, rt.Ensure(t.Context(), sb))
	sid, _, err := rt.Session(t.Context(), sb, "", thread)
	require.NoError(t, err)
	res, err := rt.Prompt(t.Context(), sb, sid, runtime.Prompt{Text: "hi"}, func(runtime.Event) {})
	require.NoError(t, err)
	require.False(t, res.IsError, res.Answer)
	require.Contains(t, res.Answer, "status 200")

	mu.Lock()
	defer mu.Unlock()
	var prompted bool
	for _, req := range seen {
		if req.Env["ANTHROPIC_BASE_URL"] != "" {
			prompted = true
			require.Equal(t, base+AnthropicPath, req.Env["ANTHROPIC_BASE_URL"])
			require.Equal(t, Token(testSecret, thread, gen), req.Env["ANTHROPIC_API_KEY"])
		}
		raw, err := json.Marshal(struct {
			Cmd []string
			Env map[string]string
		}{req.Cmd, req.Env})
		require.NoError(t, err)
		for _, s := range []string{anthropicKey, openAIKey, PlaceholderKey, e.g.LocalURL()} {
			require.NotContains(t, string(raw), s, "what the sandbox's processes got")
		}
	}
	require.True(t, prompted, "claude ran")
	box := prov.Box(h.ID)
	spec, err := json.Marshal(box.Spec)
	require.NoError(t, err)
	require.NotContains(t, string(spec), anthropicKey)
	for path, data := range box.Files {
		require.NotContains(t, string(data), anthropicKey, path)
	}
	require.JSONEq(t, `{"input_tokens":10,"output_tokens":5,"cost_micros":0}`, usageOf(t, e.store, turnID))
}

// TestCloudSandboxWithoutPublicURL: with no public URL, a turn on a cloud sandbox ends refused (a
// *runtime.NoPublicURLError, which the bot words: what to set), and its runtime never starts.
func TestCloudSandboxWithoutPublicURL(t *testing.T) {
	e := newEnv(t, Budget{})
	prov := sandboxfake.NewNamed("deno")
	e.g.Cloud(prov)
	ran := false
	prov.Exec_ = func(context.Context, *sandboxfake.Box, sandbox.ExecRequest) (sandbox.ExecResult, error) {
		ran = true
		return sandbox.ExecResult{}, nil
	}
	gen := e.session(t, "web:c1")
	e.turn(t, "web:c1", "U1", "ev1")
	h, err := prov.Create(t.Context(), sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: "web:c1", Generation: gen}})
	require.NoError(t, err)
	rt := e.g.Runtime(claudecode.New(claudecode.Config{BaseURL: e.g.LocalURL() + AnthropicPath, APIKey: PlaceholderKey}))
	err = rt.Ensure(t.Context(), sandbox.Bind(prov, h))
	var ne *runtime.NoPublicURLError
	require.ErrorAs(t, err, &ne, "the facts, for the bot to word")
	require.Equal(t, "deno", ne.Provider)
	require.ErrorContains(t, err, "gateway.public_url", "the operator's message names the setting")
	res, err := rt.Prompt(t.Context(), sandbox.Bind(prov, h), "s", runtime.Prompt{Text: "hi"}, func(runtime.Event) {})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.ErrorAs(t, res.Refusal, &ne)
	require.Equal(t, "deno", ne.Provider)
	require.False(t, ran, "nothing ran in the sandbox")
}
