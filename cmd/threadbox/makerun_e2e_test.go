package main

import (
	"crypto/rand"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestMakeRunAnswersThroughTheModelGateway is the Security issue's "AI path out of the box": `make
// run` (deploy/run.sh, as a fresh clone runs it) with only a model key in the environment and the
// gateway's upstream pointed at llmfake picks the AI runtime, uses the image with the runtimes (built
// on first use; test-services.sh has built it already, so here it is found by its recipe), and
// answers the first web chat message through it. The real key reaches llmfake, through the gateway.
//
// The database, the gateway's socket directory and the deployment label are the test's own, so that
// the run touches neither the checkout's data/ nor anyone's sandboxes; nothing else is configured.
func TestMakeRunAnswersThroughTheModelGateway(t *testing.T) {
	tests := []struct {
		runtime, keyEnv, urlEnv, urlPath string
	}{
		{"claude-code", "ANTHROPIC_API_KEY", "THREADBOX_GATEWAY_ANTHROPIC_URL", ""},
		{"opencode", "OPENAI_API_KEY", "THREADBOX_GATEWAY_OPENAI_URL", "/v1"},
	}
	prov := dockertest.New(t, docker.Options{})
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	for _, tc := range tests {
		t.Run(tc.runtime, func(t *testing.T) {
			const answer = "Hello from the model, through the gateway."
			fake := llmfake.New(llmfake.Script{Default: &llmfake.Reply{Text: answer}})
			up := httptest.NewServer(fake)
			t.Cleanup(func() { fake.Close(); up.Close() })
			key := "sk-REALKEY-" + rand.Text()
			dep := "makerun-" + strings.ToLower(rand.Text()[:10])
			destroyDeployment(t, prov, dep)
			// The socket directory must be short: a unix socket path has ~100 bytes.
			sockDir, err := os.MkdirTemp("/tmp", "tbrun")
			require.NoError(t, err)
			t.Cleanup(func() { _ = os.RemoveAll(sockDir) })

			cmd := exec.Command("bash", filepath.Join(root, "deploy/run.sh"))
			cmd.Dir = t.TempDir() // run.sh finds the checkout from its own path
			cmd.Env = append(cleanEnv(),
				tc.keyEnv+"="+key,
				tc.urlEnv+"="+up.URL+tc.urlPath,
				"THREADBOX_DATABASE_URL=sqlite:"+filepath.Join(t.TempDir(), "threadbox.db"),
				"THREADBOX_GATEWAY_SOCKET_DIR="+sockDir,
				"THREADBOX_DEPLOYMENT="+dep,
				"THREADBOX_HTTP_ADDR=127.0.0.1:0",
			)
			// run.sh builds the bot and execs it; its own group, so that a failed test ends it whole.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			t.Cleanup(func() {
				if cmd.Process != nil {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
			})
			// Compiling the bot (go run) on a loaded machine, and on a first run the image, take a while.
			s := startCmd(t, cmd, 10*time.Minute)
			log := s.logText()
			require.Contains(t, log, `"runtime": "`+tc.runtime+`"`, "the model key picks the AI runtime")
			require.Contains(t, log, "using the image with the agent runtimes (threadbox/sandbox)")
			require.Contains(t, log, "model gateway on", "the runtime goes through the gateway")

			conv := s.post(t, "/api/conversations", map[string]any{})["id"].(string)
			ev := s.events(t, conv)
			s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "Say hello, please."})
			require.Equal(t, answer, strings.TrimSpace(ev.until(t, "post", answer)), "the first message gets the model's answer")

			var called bool
			for _, r := range fake.Requests() {
				if r.API == "" {
					continue // a probe of the base URL
				}
				called = true
				got := r.Header.Get("X-Api-Key") + r.Header.Get("Authorization")
				require.Contains(t, got, key, "the gateway adds the real key upstream")
			}
			require.True(t, called, "the answer came from llmfake")

			// The turn's usage is shown: status in the thread, and admin stats in the ops view (make
			// run makes web:local an admin). llmfake reports 10 input and 5 output tokens a call.
			s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "status"})
			status := ev.until(t, "post", "Model use: this thread")
			require.Regexp(t, `Model use: this thread [1-9][0-9,]* tokens \([1-9][0-9,]* today\), you today [1-9]`, status)
			stats := s.post(t, "/api/admin/stats", map[string]any{})["output"].(string)
			require.Contains(t, stats, "Top threads today:\n  web:"+conv+" ")
			require.Contains(t, stats, "Top users today:\n  web:local ", "named as admin.users names them")

			require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM))
			select {
			case err := <-s.done:
				require.NoError(t, err, "a clean exit on SIGTERM")
			case <-time.After(time.Minute):
				t.Fatal("make run did not exit after SIGTERM")
			}
		})
	}
}

// cleanEnv is this process's environment without Threadbox settings or model keys, as on a machine
// that has never configured Threadbox; Docker, Go and the shell's own variables stay.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "THREADBOX_") || strings.HasSuffix(name, "_API_KEY") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, fmt.Sprintf("THREADBOX_CACHE_DIR=%s", cacheDir()))
}

// cacheDir is where deploy/sandbox-image/build.sh keeps its downloads, kept across runs as make
// run's own would be (this test must not download the runtimes again).
func cacheDir() string {
	if d := os.Getenv("THREADBOX_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "threadbox")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "threadbox")
}
