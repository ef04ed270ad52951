package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool"
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

// placeholderKey is what the runtimes are configured with: the forwarder replaces it with the
// sandbox token, and the gateway with the real key.
const placeholderKey = "threadbox-gateway"

// TestDockerRuntimesThroughGateway is the Security issue's first acceptance bullet, for each AI
// runtime, on real Docker with network none: a turn driven by llmfake as the gateway's upstream
// succeeds; afterwards the real key is nowhere in the sandbox (docker inspect, every process's
// environ and cmdline, the filesystem); the turn's usage is recorded; and with a budget of what the
// thread used, the next turn ends with the budget reply without reaching the model.
func TestDockerRuntimesThroughGateway(t *testing.T) {
	tests := []struct {
		name string
		new  func(t *testing.T, g *gateway.Gateway) runtime.Runtime
	}{
		{claudecode.Name, func(t *testing.T, g *gateway.Gateway) runtime.Runtime {
			return claudecode.New(claudecode.Config{BaseURL: g.LocalURL() + gateway.AnthropicPath, APIKey: placeholderKey, Model: "claude-sonnet-4-5"})
		}},
		{opencode.Name, func(t *testing.T, g *gateway.Gateway) runtime.Runtime {
			rt, err := opencode.New(opencode.Config{Secret: "runtime-secret", Model: opencode.Model{
				API: opencode.APIOpenAICompatible, Name: "fake-model", BaseURL: g.LocalURL() + gateway.OpenAIPath, APIKey: placeholderKey}})
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
			anthropicKey := "sk-ant-api03-REALKEY" + rand.Text()
			openAIKey := "sk-proj-REALKEY" + rand.Text()
			fake := llmfake.New(runtimetest.Script(sandbox.DefaultWorkDir))
			up := httptest.NewServer(fake)
			t.Cleanup(func() { fake.Close(); up.Close() })
			store := dbtest.OpenSQLite(t)
			g, err := gateway.New(gateway.Config{
				Secret: "gateway-secret-" + rand.Text(), AnthropicURL: up.URL, OpenAIURL: up.URL + "/v1",
				AnthropicKey: anthropicKey, OpenAIKey: openAIKey,
				SocketDir: shortDir(t), Forwarder: fwd,
			}, store, zaptest.NewLogger(t))
			require.NoError(t, err)
			t.Cleanup(func() { _ = g.Close() })

			gp := g.Provider(prov)
			pool, err := agentpool.New(agentpool.Config{
				Deployment: "gwtest-" + strings.ToLower(rand.Text()[:8]), Image: runtimetest.Image(),
				Network: sandbox.NetworkNone, SystemPrompt: prompts.System(prompts.SystemData{WorkDir: sandbox.DefaultWorkDir}),
				TurnTimeout: 3 * time.Minute,
			}, agentpool.Deps{Store: store, Provider: gp, Runtime: g.Runtime(tc.new(t, g)), Logger: zaptest.NewLogger(t)})
			require.NoError(t, err)
			thread := "web:gw-" + strings.ToLower(rand.Text()[:8])
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
			reqs := fake.Requests()
			require.NotEmpty(t, reqs)
			for _, r := range reqs {
				if r.API == "" {
					continue // a probe of the base URL
				}
				got := r.Header.Get("X-Api-Key") + r.Header.Get("Authorization")
				require.True(t, strings.Contains(got, anthropicKey) || strings.Contains(got, openAIKey), "the upstream got the real key: %q", got)
			}

			tr, err := store.TurnGet(t.Context(), out.TurnID)
			require.NoError(t, err)
			var usage struct{ InputTokens, OutputTokens int64 }
			require.NoError(t, json.Unmarshal(tr.Usage, &struct {
				In  *int64 `json:"input_tokens"`
				Out *int64 `json:"output_tokens"`
			}{&usage.InputTokens, &usage.OutputTokens}))
			require.Positive(t, usage.InputTokens, "usage recorded: %s", tr.Usage)
			require.Positive(t, usage.OutputTokens, "usage recorded: %s", tr.Usage)
			t.Logf("%s: turn usage %s over %d model calls", tc.name, tr.Usage, len(reqs))

			sess, err := store.SessionGet(t.Context(), thread)
			require.NoError(t, err)
			tokFile, err := os.ReadFile(filepath.Join(g.SandboxDir(thread, sess.Generation), "token"))
			require.NoError(t, err)
			inspect, err := exec.CommandContext(t.Context(), "docker", "inspect", sess.SandboxID).CombinedOutput()
			require.NoError(t, err, "%s", inspect)
			tok := strings.TrimSpace(string(tokFile))
			const sock = "/run/threadbox/gateway.sock"
			found := searchContainer(t, sess.SandboxID, anthropicKey, openAIKey, tok, sock)
			for _, key := range []string{anthropicKey, openAIKey} {
				require.NotContains(t, string(inspect), key, "docker inspect")
				require.Empty(t, found[key], "the real key is nowhere in the sandbox")
			}
			// The same search finds what is there by design (the sandbox's own token in its mounted
			// directory, the socket path on the forwarder's command line): it does look.
			require.NotEmpty(t, found[tok], "the search finds the token file")
			require.Contains(t, strings.Join(found[sock], " "), "/cmdline", "the search reads command lines")

			// Budget: what the thread has used. The next turn is refused before any model call.
			used := usage.InputTokens + usage.OutputTokens
			g.SetBudget(gateway.Budget{ThreadTokens: used})
			before := len(fake.Requests())
			out = submit(t, pool, thread, "ev2", "And now something else.")
			require.NoError(t, out.Err)
			require.True(t, out.IsError)
			var be *gateway.BudgetError
			require.ErrorAs(t, out.Refusal, &be, "the refusal reaches the bot as facts")
			require.Equal(t, gateway.ScopeThread, be.Scope)
			require.Equal(t, used, be.Used)
			require.Len(t, fake.Requests(), before, "no model call once over budget")
		})
	}
}

// submit runs one turn and waits for its outcome.
func submit(t *testing.T, pool *agentpool.Pool, thread, event, text string) agentpool.Outcome {
	t.Helper()
	done := make(chan agentpool.Outcome, 1)
	_, err := pool.Submit(t.Context(), agentpool.Request{
		ThreadKey: thread, Platform: "web", ChannelID: "c", UserID: "U1", EventID: event + "-" + thread, Text: text,
		Sink: agentpool.SinkFuncs{DeliverFunc: func(_ context.Context, out agentpool.Outcome) ([]string, error) {
			done <- out
			return make([]string, len(out.Artifacts)), nil
		}},
	})
	require.NoError(t, err)
	select {
	case out := <-done:
		return out
	case <-time.After(5 * time.Minute):
		t.Fatal("the turn did not end within 5 minutes")
	}
	return agentpool.Outcome{}
}

// searchContainer lists, for each needle, where it is in the container: /proc/<pid>/environ and cmdline of each of
// its processes, and each file of its filesystem (its root and every mount). It searches from the
// host, as root with every capability: inside, the sandbox has none, and a search run there would
// match its own command line.
func searchContainer(t *testing.T, containerID string, needles ...string) map[string][]string {
	t.Helper()
	ctx := t.Context()
	out, err := exec.CommandContext(ctx, "docker", "top", containerID, "-eo", "pid").Output()
	require.NoError(t, err)
	found := map[string][]string{}
	match := func(where string, b []byte) {
		for _, n := range needles {
			if strings.Contains(string(b), n) {
				found[n] = append(found[n], where)
			}
		}
	}
	pids := strings.Fields(string(out))[1:] // after the PID header
	require.NotEmpty(t, pids, "the sandbox runs at least its forwarder")
	for _, pid := range pids {
		for _, f := range []string{"environ", "cmdline"} {
			p := filepath.Join("/proc", pid, f)
			b, err := os.ReadFile(p)
			if err != nil {
				if _, serr := os.Stat(filepath.Join("/proc", pid)); serr == nil {
					for _, n := range needles { // still running, and not checked
						found[n] = append(found[n], "unreadable:"+p)
					}
				}
				continue
			}
			match(p, b)
		}
	}
	var c []struct {
		GraphDriver struct{ Data map[string]string }
		Mounts      []struct{ Source string }
	}
	out, err = exec.CommandContext(ctx, "docker", "inspect", containerID).Output()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &c))
	require.Len(t, c, 1)
	roots := []string{c[0].GraphDriver.Data["MergedDir"]}
	require.NotEmpty(t, roots[0], "the container's root filesystem on the host (overlay2)")
	for _, m := range c[0].Mounts {
		roots = append(roots, m.Source)
	}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil {
				match(p, b)
			}
			return nil
		})
		require.NoError(t, err)
	}
	return found
}

// buildForwarder compiles cmd/threadbox-forward static, for the Docker host (this machine).
func buildForwarder(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "threadbox-forward")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-trimpath", "-o", out, "github.com/threadbox/threadbox/cmd/threadbox-forward")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goruntime.GOARCH)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build threadbox-forward: %s", b)
	return out
}

// shortDir is a temporary directory whose path leaves room for socket names (~108 bytes at most).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "tbgw")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
