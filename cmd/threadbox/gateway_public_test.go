package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

const realAnthropicKey = "sk-ant-REAL-KEY-must-stay-in-the-bot"

// daytonaAIEnv is an AI runtime (claude-code) on Daytona with the gateway on (the default), and
// what the sandboxes' commands were given.
func daytonaAIEnv(t *testing.T, extra ...string) ([]string, *sandboxfake.Provider, func() []sandbox.ExecRequest) {
	t.Helper()
	backend := sandboxfake.New()
	var mu sync.Mutex
	var seen []sandbox.ExecRequest
	backend.Exec_ = func(_ context.Context, _ *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		if req.Stdin != nil {
			// Daytona's toolbox runs each command as a script on the shell's standard input.
			b, err := io.ReadAll(req.Stdin)
			if err != nil {
				return sandbox.ExecResult{}, err
			}
			req.Cmd = append(req.Cmd, string(b))
		}
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req)
		return sandbox.ExecResult{}, nil
	}
	f := daytonafake.New(t, daytonafake.Options{Backend: backend, Snapshots: []string{"tb-snapshot"}})
	env := baseEnv(t, append([]string{"THREADBOX_SANDBOX_PROVIDER=daytona",
		"THREADBOX_SANDBOX_DAYTONA_API_URL=" + f.APIURL(), "THREADBOX_SANDBOX_DAYTONA_API_KEY=" + daytonafake.APIKey,
		"THREADBOX_SANDBOX_DAYTONA_SNAPSHOT=tb-snapshot", "THREADBOX_RUNTIME_NAME=claude-code",
		"ANTHROPIC_API_KEY=" + realAnthropicKey}, extra...)...)
	return env, backend, func() []sandbox.ExecRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]sandbox.ExecRequest(nil), seen...)
	}
}

// TestCloudGatewayNeedsPublicURL: an AI runtime on Daytona with the gateway on and no public URL is
// a configuration error that names the key, at start and in doctor.
func TestCloudGatewayNeedsPublicURL(t *testing.T) {
	env, _, _ := daytonaAIEnv(t)
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, env)
	require.NoError(t, m.ParseFlags([]string{"serve"}))
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	_, err := m.buildApp(t.Context())
	require.ErrorContains(t, err, "gateway.public_url (THREADBOX_GATEWAY_PUBLIC_URL) is required")
	require.ErrorContains(t, err, "daytona")

	out, _, _ := runMain(t, env, "doctor")
	line := findLine(out, "PROBLEM gateway: serve will refuse to start")
	require.NotEmpty(t, line, out)
	require.Contains(t, line, "gateway.public_url")
}

// TestDaytonaRuntimeUsesPublicGateway: a turn's runtime on a Daytona sandbox is given the public URL
// and the sandbox's own token, and the real key reaches neither the sandbox's commands nor its spec.
func TestDaytonaRuntimeUsesPublicGateway(t *testing.T) {
	const public = "https://bot.example.com/gateway"
	env, backend, seen := daytonaAIEnv(t, "THREADBOX_GATEWAY_PUBLIC_URL="+public)
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, env)
	require.NoError(t, m.ParseFlags([]string{"serve"}))
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	a, err := m.buildApp(t.Context())
	require.NoError(t, err)
	require.NotNil(t, a.gw, "the gateway serves the Daytona sandboxes")
	require.Equal(t, public, a.gw.PublicURL())

	prov := a.provs[0]
	require.Equal(t, "daytona", prov.Name())
	h, err := prov.Create(t.Context(), sandbox.Spec{Image: "x", Labels: sandbox.Labels{Thread: "web:c1", Generation: 3}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = prov.Destroy(context.WithoutCancel(t.Context()), h) })
	sb := sandbox.Bind(prov, h)
	require.NoError(t, a.rts[0].Ensure(t.Context(), sb))
	// The fake runs no claude, so the turn's outcome is not the point: what it was started with is.
	_, _ = a.rts[0].Prompt(t.Context(), sb, "00000000-0000-4000-8000-000000000001", runtime.Prompt{Text: "hi"}, func(runtime.Event) {})

	secret, err := m.runtimeSecret()
	require.NoError(t, err)
	tok := gateway.Token(secret, "web:c1", 3)
	var all strings.Builder
	for _, req := range seen() {
		raw, err := json.Marshal(struct {
			Cmd []string
			Env map[string]string
		}{req.Cmd, req.Env})
		require.NoError(t, err)
		all.Write(raw)
	}
	infos, err := backend.List(t.Context(), nil)
	require.NoError(t, err)
	require.NotEmpty(t, infos)
	for _, info := range infos {
		box := backend.Box(info.Handle.ID)
		raw, err := json.Marshal(box.Spec)
		require.NoError(t, err)
		all.Write(raw)
		for _, data := range box.Files {
			all.Write(data)
		}
	}
	got := all.String()
	require.Contains(t, got, "ANTHROPIC_BASE_URL="+public+gateway.AnthropicPath)
	require.Contains(t, got, "ANTHROPIC_API_KEY="+tok)
	require.NotContains(t, got, realAnthropicKey)
	require.NotContains(t, got, gateway.PlaceholderKey)
	require.NotContains(t, got, "127.0.0.1:", "no forwarder address: a cloud sandbox has none")
}

// TestDoctorWarnsCloudNetworkClosed: with public_url set but sandbox.network none, doctor warns that
// Daytona sandboxes cannot reach it; with network full, it says the gateway serves them.
func TestDoctorWarnsCloudNetworkClosed(t *testing.T) {
	const public = "https://bot.example.com/gateway"
	env, _, _ := daytonaAIEnv(t, "THREADBOX_GATEWAY_PUBLIC_URL="+public)
	out, _, _ := runMain(t, env, "doctor")
	line := findLine(out, "WARN    gateway: daytona sandboxes reach the model gateway")
	require.NotEmpty(t, line, out)
	require.Contains(t, line, "sandbox.network: full")

	env, _, _ = daytonaAIEnv(t, "THREADBOX_GATEWAY_PUBLIC_URL="+public, "THREADBOX_SANDBOX_NETWORK=full",
		"THREADBOX_GATEWAY_BUDGET_THREAD_TOKENS=100000")
	out, _, _ = runMain(t, env, "doctor")
	require.Contains(t, out, "daytona sandboxes call it at "+public+" with their own token", out)
}

// TestServeMountsPublicGateway: serve answers the gateway under /gateway/ beside the web chat, and
// refuses a call without a valid token there.
func TestServeMountsPublicGateway(t *testing.T) {
	env, _, _ := daytonaAIEnv(t, "THREADBOX_GATEWAY_PUBLIC_URL=https://bot.example.com/gateway",
		"THREADBOX_SANDBOX_NETWORK=full", "THREADBOX_HTTP_ADDR=127.0.0.1:0",
		"THREADBOX_RUNTIME_SECRET="+strings.Repeat("cd", 16))
	sv := serveInProcess(t, env)
	t.Cleanup(func() {
		sv.cancel()
		require.NoError(t, <-sv.done)
		require.NoError(t, sv.m.Close())
	})
	base := "http://" + sv.addr + gateway.PublicPath
	resp, err := http.Get(base + gateway.AnthropicPath)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "Claude Code's probe of its base URL")

	for name, tok := range map[string]string{
		"no token":        "",
		"the real key":    realAnthropicKey,
		"a forged token":  gateway.Token("not-the-secret-0123456789abcdef0123", "web:c1", 1),
		"no such session": gateway.Token(strings.Repeat("cd", 16), "web:c1", 1),
	} {
		req, err := http.NewRequest(http.MethodPost, base+gateway.AnthropicPath+"/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("X-Api-Key", tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s: %s", name, body)
		require.Contains(t, string(body), "authentication_error", name)
	}
}
