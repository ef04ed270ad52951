// Package sandboxtest is the conformance suite every sandbox provider passes (DESIGN §8).
//
//	func TestConformance(t *testing.T) {
//		sandboxtest.Run(t, sandboxtest.Config{New: newProvider, Image: "threadbox/sandbox-test:latest"})
//	}
//
// The suite skips what the provider's Capabilities say it cannot enforce. It runs commands that a
// busybox image has (sh, id, ls, cat, stat, head, setsid, nc with -ll and -e), as in the
// threadbox/sandbox-test image. Every sandbox it creates is destroyed in t.Cleanup, and every test
// uses a deployment label of its own, so tests can run in parallel and List sees only its own.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// Config describes the provider under test.
type Config struct {
	// New returns the provider. It is called once per Run.
	New func(t *testing.T) sandbox.Provider
	// Image is a busybox-like image with a non-root user 1000 and /workspace.
	Image string
	// Deployment prefixes the deployment label; each test appends a random suffix (default "sbxtest").
	Deployment string
	// RemoveOutOfBand and StopOutOfBand remove or stop a sandbox behind the provider's back (docker
	// rm -f, docker stop). Nil skips the cases that need them.
	RemoveOutOfBand func(t *testing.T, h sandbox.Handle)
	StopOutOfBand   func(t *testing.T, h sandbox.Handle)
	// Skip names cases that cannot run against this provider for a reason its Capabilities cannot
	// express (for example the local provider runs host tools, not the image's busybox), with why.
	// The provider must cover what it skips with tests of its own.
	Skip map[string]string
}

// RequireServicesEnv, when set, turns a missing test service from a skip into a failure (make test
// sets it, so CI never passes by skipping).
const RequireServicesEnv = "THREADBOX_REQUIRE_SERVICES"

// RequireService gates a test on a real service: when probeErr is nil it returns; otherwise it skips
// the test, or fails it with a one-line fix when THREADBOX_REQUIRE_SERVICES is set.
func RequireService(t testing.TB, service string, probeErr error) {
	t.Helper()
	if probeErr == nil {
		return
	}
	msg := fmt.Sprintf("%s unavailable: %s", service, oneLine(probeErr))
	if os.Getenv(RequireServicesEnv) != "" {
		t.Fatalf("%s; run deploy/test-services.sh (as root) to start the test services and build the test images", msg)
	}
	t.Skipf("%s (set %s=1 to make this a failure)", msg, RequireServicesEnv)
}

// Run runs the conformance suite against cfg.
func Run(t *testing.T, cfg Config) {
	require.NotNil(t, cfg.New, "sandboxtest.Config.New is required")
	require.NotEmpty(t, cfg.Image, "sandboxtest.Config.Image is required")
	if cfg.Deployment == "" {
		cfg.Deployment = "sbxtest"
	}
	s := &suite{cfg: cfg, p: cfg.New(t)}
	s.caps = s.p.Capabilities()

	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Lifecycle", s.testLifecycle},
		{"OutOfBand", s.testOutOfBand},
		{"InvalidSpec", s.testInvalidSpec},
		{"List", s.testList},
		{"ConcurrentCreateDestroy", s.testConcurrent},
		{"Exec", s.testExec},
		{"ExecTimeout", s.testExecTimeout},
		{"ExecTimeoutForkBomb", s.testExecTimeoutForkBomb},
		{"ExecCancel", s.testExecCancel},
		{"Env", s.testEnv},
		{"LimitsAndUser", s.testLimits},
		{"NetworkNone", s.testNetworkNone},
		{"ReadOnlyRoot", s.testReadOnlyRoot},
		{"Files", s.testFiles},
		{"ReadTree", s.testReadTree},
		{"Dial", s.testDial},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := cfg.Skip[tc.name]; ok {
				t.Skip(why)
			}
			t.Parallel() // bounded by -parallel (GOMAXPROCS by default)
			tc.run(t)
		})
	}
}

type suite struct {
	cfg  Config
	p    sandbox.Provider
	caps sandbox.Capabilities
}

// deployment returns a deployment label no other test (or earlier run) uses.
func (s *suite) deployment() string {
	return s.cfg.Deployment + "-" + strings.ToLower(rand.Text()[:8])
}

// spec is a minimal valid spec in a fresh deployment.
func (s *suite) spec(t *testing.T) sandbox.Spec {
	return sandbox.Spec{
		Image:  s.cfg.Image,
		Labels: sandbox.Labels{Deployment: s.deployment(), Thread: "test:" + t.Name(), Generation: 1},
	}
}

// create makes a sandbox and destroys it when the test ends, whatever happened.
func (s *suite) create(t *testing.T, spec sandbox.Spec) sandbox.Handle {
	t.Helper()
	h, err := s.p.Create(t.Context(), spec)
	require.NoError(t, err, "Create")
	require.False(t, h.IsZero(), "Create returned an empty handle")
	s.cleanup(t, h)
	return h
}

func (s *suite) cleanup(t *testing.T, h sandbox.Handle) {
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.p.Destroy(ctx, h); err != nil {
			t.Errorf("cleanup: Destroy %s: %v", h.ID, err)
		}
	})
}

// sh runs script with sh -c and returns stdout, stderr and the result; opts adjust the request.
func (s *suite) sh(t *testing.T, h sandbox.Handle, script string, opts ...func(*sandbox.ExecRequest)) (string, string, sandbox.ExecResult) {
	t.Helper()
	var out, errb strings.Builder
	req := sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb, Timeout: time.Minute}
	for _, o := range opts {
		o(&req)
	}
	res, err := s.p.Exec(t.Context(), h, req)
	require.NoError(t, err, "Exec %q", script)
	return out.String(), errb.String(), res
}

// ok runs script, requires exit 0, and returns its trimmed stdout.
func (s *suite) ok(t *testing.T, h sandbox.Handle, script string, opts ...func(*sandbox.ExecRequest)) string {
	t.Helper()
	out, errOut, res := s.sh(t, h, script, opts...)
	require.Equal(t, 0, res.ExitCode, "exit code of %q (stderr %q)", script, errOut)
	return strings.TrimSpace(out)
}

// eventually polls cond with a backoff from 10 ms until it holds or timeout passes. It is for
// waiting on something outside the test's control (a server inside the sandbox starting, init
// reaping a killed process); everything else synchronises on results or channels.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := 10 * time.Millisecond
	for {
		done, detail := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, detail)
		}
		timer := time.NewTimer(delay)
		select {
		case <-t.Context().Done():
			timer.Stop()
			t.Fatalf("%s: test ended: %s", what, detail)
		case <-timer.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

func requireIs(t *testing.T, err, target error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.Truef(t, errors.Is(err, target), "want an error wrapping %q, got %v", target, err)
}

func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
