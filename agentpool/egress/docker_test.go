package egress_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/egress"
	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

const probePath = "/opt/probe/probe"

// TestDockerRestricted is the Security issue's egress acceptance bullet, on real Docker: from inside
// a restricted sandbox (network none, the gateway's forwarder relaying egress too), the model
// gateway works and an allowlisted host works (a loopback HTTP server standing in for it, named
// mirror.test, which the allowlist may reach because the test names its address explicitly). The
// metadata address, the host's addresses, another sandbox and a host off the allowlist all fail,
// with the proxy's reason; each refusal is counted. Nothing here sends a packet beyond loopback: the
// proxy refuses before it resolves or dials, and the sandbox has no route.
func TestDockerRestricted(t *testing.T) {
	prov := dockertest.New(t, docker.Options{})
	fwd := buildStatic(t, "github.com/threadbox/threadbox/cmd/threadbox-forward")
	probe := buildStatic(t, "./testdata/probe")
	ctx := t.Context()

	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("mirror answers " + r.Host))
	}))
	t.Cleanup(mirror.Close)
	mu, _ := url.Parse(mirror.URL)
	port := mu.Port()

	// The host's own non-loopback addresses: what a sandbox on a bridge would reach its host by.
	own, err := egress.InterfaceAddrs()
	require.NoError(t, err)
	var hostAddrs []netip.Addr
	for _, a := range own {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			hostAddrs = append(hostAddrs, a)
		}
	}
	require.NotEmpty(t, hostAddrs, "this host has an address besides loopback")

	metrics := &counter{}
	x, err := egress.New(egress.Config{
		Allow: []string{"mirror.test:" + port, "127.0.0.1:" + port, "hostname.test"},
		Resolver: fakeResolver{
			"mirror.test":   {netip.MustParseAddr("127.0.0.1")},
			"hostname.test": {hostAddrs[0]},
		},
		SocketDir: shortDir(t), Forwarder: fwd, Metrics: metrics,
	}, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = x.Close() })

	fake := llmfake.New(llmfake.Script{Default: &llmfake.Reply{Text: "hello through the gateway"}})
	up := httptest.NewServer(fake)
	t.Cleanup(func() { fake.Close(); up.Close() })
	store := dbtest.OpenSQLite(t)
	g, err := gateway.New(gateway.Config{
		Secret: "s-" + rand.Text(), AnthropicURL: up.URL, OpenAIURL: up.URL + "/v1",
		AnthropicKey: "sk-ant-real", SocketDir: shortDir(t), Forwarder: fwd,
	}, store, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })

	withProbe := &mountProvider{Provider: prov, mount: sandbox.Mount{Source: probe, Target: probePath, ReadOnly: true}}
	gated := g.Provider(x.Provider(withProbe)) // as serve wires it: the gateway's forwarder relays egress
	alone := x.Provider(withProbe)             // restricted without the gateway (the shell runtime)
	deployment := "egresstest-" + strings.ToLower(rand.Text()[:8])

	threadA := "web:egress-a-" + strings.ToLower(rand.Text()[:6])
	genA := activeSession(t, store, threadA)
	a := create(t, gated, sandbox.Spec{Image: dockertest.Image(), Labels: sandbox.Labels{Deployment: deployment, Thread: threadA, Generation: genA}})
	b := create(t, alone, sandbox.Spec{Image: dockertest.Image(), Labels: sandbox.Labels{Deployment: deployment, Thread: "web:egress-b", Generation: 1}})
	waitListening(t, prov, a, "18080", "18081")
	waitListening(t, prov, b, "18081")

	// Another sandbox runs a server on its own loopback; it answers there.
	sh(t, prov, b, "echo sandbox-b-here > /workspace/index.html && busybox httpd -p 127.0.0.1:18090 -h /workspace")
	require.Contains(t, sh(t, prov, b, "wget -Y off -q -O- http://127.0.0.1:18090/index.html"), "sandbox-b-here", "sandbox B's server answers on its loopback")

	t.Run("environment", func(t *testing.T) {
		env := sh(t, prov, a, "env")
		require.Contains(t, env, "HTTPS_PROXY=http://127.0.0.1:18081")
		require.Contains(t, env, "HTTP_PROXY=http://127.0.0.1:18081")
		require.Contains(t, env, "NO_PROXY=localhost,127.0.0.1,::1")
		require.Equal(t, "lo", strings.TrimSpace(sh(t, prov, a, "ls /sys/class/net")), "network none: loopback only")
	})

	t.Run("gateway works", func(t *testing.T) {
		turn := runningTurn(t, store, threadA)
		defer finishTurn(t, store, turn)
		out := run(t, prov, a, "post", "http://127.0.0.1:18080/anthropic/v1/messages", "threadbox-gateway",
			`{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
		require.Contains(t, out, "STATUS 200", out)
		require.Contains(t, out, "hello through the gateway")
	})

	mirrorTarget := "mirror.test:" + port
	for name, h := range map[string]sandbox.Handle{"with gateway": a, "egress alone": b} {
		t.Run("allowlisted host works/"+name, func(t *testing.T) {
			before := metrics.get(egress.ResultAllowed)
			out := run(t, prov, h, "get", "http://"+mirrorTarget+"/")
			require.Contains(t, out, "STATUS 200", out)
			require.Contains(t, out, "mirror answers "+mirrorTarget)
			out = run(t, prov, h, "connect", mirrorTarget)
			require.Contains(t, out, "STATUS 200", out)
			require.Contains(t, out, "mirror answers "+mirrorTarget, "through a CONNECT tunnel")
			require.Equal(t, before+2, metrics.get(egress.ResultAllowed))
		})
	}

	refused := []struct {
		name, mode, arg, want, result string
	}{
		{"metadata address", "get", "http://169.254.169.254/latest/meta-data/", "169.254.169.254:80 refused: not on the allowlist", egress.ResultRefusedHost},
		{"metadata address, CONNECT", "connect", "169.254.169.254:443", "169.254.169.254:443 refused: not on the allowlist", egress.ResultRefusedHost},
		{"host loopback, another port", "get", "http://127.0.0.1:1/", "127.0.0.1:1 refused: not on the allowlist", egress.ResultRefusedHost},
		{"allowlisted name resolving to the host", "get", "http://hostname.test/", "is an address of the bot's host", egress.ResultRefusedAddress},
		{"another sandbox's server, by the proxy", "get", "http://127.0.0.1:18090/", "127.0.0.1:18090 refused: not on the allowlist", egress.ResultRefusedHost},
		{"another sandbox by its name", "connect", b.ID[:12] + ":18090", "refused: not on the allowlist", egress.ResultRefusedHost},
		{"off the allowlist", "get", "http://example.com/", "example.com:80 refused: not on the allowlist", egress.ResultRefusedHost},
		{"off the allowlist, CONNECT", "connect", "github.com:443", "github.com:443 refused: not on the allowlist", egress.ResultRefusedHost},
	}
	for _, ha := range hostAddrs {
		refused = append(refused, struct{ name, mode, arg, want, result string }{
			"host address " + ha.String(), "connect", netip.AddrPortFrom(ha, 22).String(), "refused: not on the allowlist", egress.ResultRefusedHost,
		})
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			before := metrics.get(tc.result)
			out := run(t, prov, a, tc.mode, tc.arg)
			require.Contains(t, out, "STATUS 403", out)
			require.Contains(t, out, tc.want, out)
			require.Equal(t, before+1, metrics.get(tc.result), "counted as %s", tc.result)
		})
	}

	// Without the proxy there is no way out at all: no route from network none, and sandbox B's
	// server is not on A's loopback.
	for _, target := range []string{"169.254.169.254:80", netip.AddrPortFrom(hostAddrs[0], 22).String(), "127.0.0.1:18090"} {
		t.Run("direct fails/"+target, func(t *testing.T) {
			out := run(t, prov, a, "direct", target)
			require.Contains(t, out, "ERROR", out)
			require.Regexp(t, "network is unreachable|connection refused", out)
		})
	}

	// Destroying the sandbox removes its socket: nothing is left to dial.
	sockDir := x.SandboxDir(threadA, genA)
	require.FileExists(t, filepath.Join(sockDir, "egress.sock"))
	require.NoError(t, gated.Destroy(ctx, a))
	require.NoDirExists(t, sockDir)
}

// mountProvider adds a bind mount to every sandbox it creates (the probe binary).
type mountProvider struct {
	sandbox.Provider
	mount sandbox.Mount
}

func (p *mountProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	spec.Mounts = append(append([]sandbox.Mount(nil), spec.Mounts...), p.mount)
	return p.Provider.Create(ctx, spec)
}

func create(t *testing.T, p sandbox.Provider, spec sandbox.Spec) sandbox.Handle {
	t.Helper()
	h, err := p.Create(t.Context(), spec)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	return h
}

// sh runs a shell script in the sandbox and returns its output (stdout and stderr).
func sh(t *testing.T, p sandbox.Provider, h sandbox.Handle, script string) string {
	t.Helper()
	return execOut(t, p, h, []string{"/bin/sh", "-c", script})
}

// run runs the probe in the sandbox.
func run(t *testing.T, p sandbox.Provider, h sandbox.Handle, args ...string) string {
	t.Helper()
	return execOut(t, p, h, append([]string{probePath}, args...))
}

func execOut(t *testing.T, p sandbox.Provider, h sandbox.Handle, cmd []string) string {
	t.Helper()
	var out bytes.Buffer
	res, err := p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: cmd, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, "%v: %s", cmd, out.String())
	return out.String()
}

// waitListening waits, inside the sandbox, until the forwarder listens on each port: it starts with
// the sandbox, a moment after Create returns.
func waitListening(t *testing.T, p sandbox.Provider, h sandbox.Handle, ports ...string) {
	t.Helper()
	for _, port := range ports {
		sh(t, p, h, "i=0; until "+probePath+" direct 127.0.0.1:"+port+" | grep -q CONNECTED; do i=$((i+1)); [ $i -lt 500 ] || exit 1; usleep 20000; done")
	}
}

// activeSession makes the thread's session active in its next generation (the gateway checks it).
func activeSession(t *testing.T, st db.Store, thread string) int64 {
	t.Helper()
	_, _, err := st.SessionCreate(t.Context(), db.NewSession{ThreadKey: thread, Platform: "web", Provider: "docker", Runtime: "shell"})
	require.NoError(t, err)
	s, err := st.SessionTransition(t.Context(), thread, db.Transition{
		From: []db.SessionStatus{db.SessionCreating, db.SessionActive, db.SessionDestroyed}, To: db.SessionActive, BumpGeneration: true,
	})
	require.NoError(t, err)
	return s.Generation
}

func runningTurn(t *testing.T, st db.Store, thread string) int64 {
	t.Helper()
	tr, err := st.TurnInsert(t.Context(), db.NewTurn{ThreadKey: thread, PlatformEventID: "ev-" + rand.Text(), UserID: "U1", Prompt: "p"})
	require.NoError(t, err)
	_, err = st.TurnStart(t.Context(), tr.ID, "")
	require.NoError(t, err)
	return tr.ID
}

func finishTurn(t *testing.T, st db.Store, id int64) {
	t.Helper()
	_, err := st.TurnFinish(t.Context(), id, db.TurnResult{Status: db.TurnDone})
	require.NoError(t, err)
}

// buildStatic compiles a main package static, for the Docker host (this machine).
func buildStatic(t *testing.T, pkg string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goruntime.GOARCH)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, b)
	return out
}

// shortDir is a temporary directory whose path leaves room for socket names (~108 bytes at most).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "tbeg")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
