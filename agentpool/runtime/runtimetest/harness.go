package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// DefaultImage is the sandbox image with the runtimes, built by deploy/sandbox-image/build.sh runtimes.
const DefaultImage = "threadbox/sandbox:latest"

// Image is THREADBOX_TEST_RUNTIME_IMAGE, or DefaultImage.
func Image() string {
	if img := os.Getenv("THREADBOX_TEST_RUNTIME_IMAGE"); img != "" {
		return img
	}
	return DefaultImage
}

// Where the fake model lives inside the sandbox. It is started on the sandbox's loopback, so the
// runtime reaches it with network none; the test reaches it through the provider's Dial.
const (
	fakeDir  = "/tmp/llmfake"
	fakePort = 18089
)

// Provider returns a Docker provider on the engine named by the DOCKER_* environment, or skips (fails
// with THREADBOX_REQUIRE_SERVICES set) when the engine or the runtime image is missing.
func Provider(t testing.TB) *docker.Provider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := docker.New(ctx, docker.Options{})
	sandboxtest.RequireService(t, "docker daemon", err)
	t.Cleanup(func() { _ = p.Close() })
	sandboxtest.RequireService(t, "runtime sandbox image (deploy/sandbox-image/build.sh runtimes)", p.CheckImage(ctx, Image()))
	return p
}

// NewSandbox creates a sandbox from Image() with network none, destroyed when t ends.
func NewSandbox(t testing.TB, p sandbox.Provider, name string) (sandbox.Sandbox, sandbox.Handle) {
	t.Helper()
	h, err := p.Create(t.Context(), sandbox.Spec{
		Image:   Image(),
		Network: sandbox.NetworkNone,
		Labels:  sandbox.Labels{Deployment: "rttest-" + strings.ToLower(rand.Text()[:8]), Thread: "test:" + name, Generation: 1},
	})
	require.NoError(t, err, "create sandbox")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Destroy(ctx, h); err != nil {
			t.Logf("destroy sandbox %s: %v", h.ID, err)
		}
	})
	return sandbox.Bind(p, h), h
}

// BuildFake compiles cmd/llmfake as a static binary for the sandbox (same architecture as the Docker
// host, which the tests assume to be this machine) and returns its path.
func BuildFake(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		// go test runs with its own toolchain's bin first in PATH; this covers a test binary run by hand.
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "llmfake")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-trimpath", "-o", out, "github.com/threadbox/threadbox/agentpool/runtime/llmfake/cmd/llmfake")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goruntime.GOARCH)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build llmfake: %s", b)
	return out
}

// Fake is the scripted model running inside one sandbox.
type Fake struct {
	*llmfake.Client
	sb  sandbox.Sandbox
	bin []byte
	// URL is the fake's address as the runtime inside the sandbox sees it (no path).
	URL string
}

// StartFake copies the fake into the sandbox, starts it on the sandbox's loopback, and waits until it
// answers. Call Restart after the sandbox was stopped.
func StartFake(t testing.TB, sb sandbox.Sandbox, binPath string, script llmfake.Script) *Fake {
	t.Helper()
	bin, err := os.ReadFile(binPath)
	require.NoError(t, err)
	f := &Fake{
		sb: sb, bin: bin, URL: fmt.Sprintf("http://127.0.0.1:%d", fakePort),
		Client: &llmfake.Client{HTTP: DialClient(sb, fakePort), URL: fmt.Sprintf("http://127.0.0.1:%d", fakePort)},
	}
	ctx := t.Context()
	require.NoError(t, sb.WriteFile(ctx, fakeDir+"/llmfake", bin, 0o755))
	f.Restart(t, script)
	return f
}

// Restart starts the fake again (after a stop, or to reset it) with script.
func (f *Fake) Restart(t testing.TB, script llmfake.Script) {
	t.Helper()
	ctx := t.Context()
	raw, err := json.Marshal(script)
	require.NoError(t, err)
	require.NoError(t, f.sb.WriteFile(ctx, fakeDir+"/script.json", raw, 0o644))
	f.HTTP.Transport.(*http.Transport).CloseIdleConnections()
	res, err := f.sb.Exec(ctx, sandbox.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", `pkill -f "^$1/llmfake" ; nohup "$1/llmfake" -addr "127.0.0.1:$2" -script "$1/script.json" >"$1/log" 2>&1 </dev/null &`,
			"sh", fakeDir, fmt.Sprint(fakePort)},
		Timeout: 30 * time.Second,
	})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode)
	require.NoError(t, Eventually(ctx, 30*time.Second, func() (bool, error) { return f.Health(ctx) == nil, nil }), "llmfake did not come up")
}

// DialClient returns an HTTP client whose connections go through the provider's Dial into the
// sandbox, whatever host the URL names.
func DialClient(sb sandbox.Sandbox, port int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return sb.Dial(ctx, port) },
		// Each connection is an exec in the sandbox: keep a few for reuse, not for long.
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}}
}

// Eventually polls cond (an external process's state) with a backoff from 20 ms up to 500 ms until it
// holds, cond fails, ctx ends or within passes. The last cond error is reported on timeout.
func Eventually(ctx context.Context, within time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("condition not met within %s: %w", within, ctx.Err())
		case <-t.C:
		}
		delay = min(delay*3/2, 500*time.Millisecond)
	}
}

// Sh runs a shell command in the sandbox and returns its stdout, failing the test on a non-zero exit.
func Sh(t testing.TB, sb sandbox.Sandbox, script string, args ...string) string {
	t.Helper()
	var out, errb strings.Builder
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
		Cmd: append([]string{"/bin/sh", "-c", script, "sh"}, args...), Stdout: &out, Stderr: &errb, Timeout: time.Minute,
	})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, "%s: %s", script, errb.String())
	return out.String()
}
