package gateway_test

import (
	"crypto/rand"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"context"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/egress"
	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/claudecode"
	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/agentpool/runtime/sandboxagent"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/prompts"
	"github.com/threadbox/threadbox/sandbox"
)

// TestDockerRuntimesUnderRestrictedEgress: restricted egress is the AI runtimes' default, so each
// runtime must still reach the gateway with HTTP_PROXY and HTTPS_PROXY set in its sandbox (NO_PROXY
// keeps loopback direct), with the gateway's forwarder relaying egress too, as serve wires it.
func TestDockerRuntimesUnderRestrictedEgress(t *testing.T) {
	tests := []struct {
		name string
		new  func(t *testing.T, g *gateway.Gateway) runtime.Runtime
	}{
		{claudecode.Name, func(t *testing.T, g *gateway.Gateway) runtime.Runtime {
			return claudecode.New(claudecode.Config{BaseURL: g.LocalURL() + gateway.AnthropicPath, APIKey: placeholderKey, Model: "claude-sonnet-4-5"})
		}},
		{opencode.Name, func(t *testing.T, g *gateway.Gateway) runtime.Runtime {
			rt, err := opencode.New(opencode.Config{Secret: "runtime-secret", Model: opencode.Model{
				API: opencode.APIAnthropic, Name: "fake-model", BaseURL: g.LocalURL() + gateway.AnthropicPath + "/v1", APIKey: placeholderKey}})
			require.NoError(t, err)
			return rt
		}},
		{sandboxagent.Name, func(t *testing.T, g *gateway.Gateway) runtime.Runtime {
			rt, err := sandboxagent.New(sandboxagent.Config{Secret: "runtime-secret", Model: opencode.Model{
				API: opencode.APIOpenAICompatible, Name: "fake-model", BaseURL: g.LocalURL() + gateway.OpenAIPath, APIKey: placeholderKey}})
			require.NoError(t, err)
			return rt
		}},
	}
	prov := runtimetest.Provider(t)
	fwd := buildForwarder(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := llmfake.New(runtimetest.Script(sandbox.DefaultWorkDir))
			up := httptest.NewServer(fake)
			t.Cleanup(func() { fake.Close(); up.Close() })
			store := dbtest.OpenSQLite(t)
			g, err := gateway.New(gateway.Config{
				Secret: "gateway-secret-" + rand.Text(), AnthropicURL: up.URL, OpenAIURL: up.URL + "/v1",
				AnthropicKey: "sk-ant-real-" + rand.Text(), OpenAIKey: "sk-real-" + rand.Text(),
				SocketDir: shortDir(t), Forwarder: fwd,
			}, store, zaptest.NewLogger(t))
			require.NoError(t, err)
			t.Cleanup(func() { _ = g.Close() })
			x, err := egress.New(egress.Config{SocketDir: shortDir(t), Forwarder: fwd}, zaptest.NewLogger(t))
			require.NoError(t, err)
			t.Cleanup(func() { _ = x.Close() })

			pool, err := agentpool.New(agentpool.Config{
				Deployment: "gwegress-" + strings.ToLower(rand.Text()[:8]), Image: runtimetest.Image(),
				Network: sandbox.NetworkNone, SystemPrompt: prompts.System(prompts.SystemData{WorkDir: sandbox.DefaultWorkDir}),
				TurnTimeout: 3 * time.Minute,
			}, agentpool.Deps{Store: store, Provider: g.Provider(x.Provider(prov)), Runtime: g.Runtime(tc.new(t, g)), Logger: zaptest.NewLogger(t)})
			require.NoError(t, err)
			thread := "web:gwe-" + strings.ToLower(rand.Text()[:8])
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				require.NoError(t, pool.Destroy(ctx, thread))
				_ = pool.Shutdown(ctx)
			})

			out := submit(t, pool, thread, "ev1", "Please create the greeting file. TB-WRITE")
			require.NoError(t, out.Err)
			require.False(t, out.IsError, out.Answer)
			require.Equal(t, "Wrote hello.txt for you: it is in output/display.", strings.TrimSpace(out.Answer))
		})
	}
}
