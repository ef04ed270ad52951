package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/threadbox/threadbox/db/dbtest"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// runMain drives the program as the binary would, returning stdout, stderr and the error.
func runMain(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, env)
	err := m.ParseFlags(args)
	if err == nil {
		err = m.Run(context.Background())
	}
	require.NoError(t, m.Close())
	return stdout.String(), stderr.String(), err
}

// baseEnv points the database at a fresh SQLite file so tests never touch ./data.
func baseEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	return append([]string{"THREADBOX_DATABASE_URL=sqlite:" + filepath.Join(t.TempDir(), "tb.db")}, extra...)
}

func requireServices(t *testing.T) {
	t.Helper()
	if os.Getenv("THREADBOX_REQUIRE_SERVICES") == "" {
		t.Skip("THREADBOX_REQUIRE_SERVICES unset: skipping a test that needs Docker and Redis (make test sets it)")
	}
}

func TestVersion(t *testing.T) {
	out, _, err := runMain(t, nil, "version")
	require.NoError(t, err)
	require.Equal(t, "threadbox dev\n", out)
}

func TestUnknownCommandShowsUsage(t *testing.T) {
	_, stderr, err := runMain(t, baseEnv(t), "frobnicate")
	require.ErrorIs(t, err, errUsage)
	require.Contains(t, stderr, `unknown command "frobnicate"`)
	require.Contains(t, stderr, "doctor")
}

func TestBadConfigNamesTheKey(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("sandbox:\n  resources:\n    memory_mb: 64\n"), 0o600))
	_, _, err := runMain(t, baseEnv(t), "--config", cfg, "doctor")
	require.ErrorContains(t, err, "sandbox.resources.memory_mb = 64: must be between 512 and 32768")

	_, _, err = runMain(t, baseEnv(t, "THREADBOX_CONFIG="+cfg), "doctor")
	require.ErrorContains(t, err, "sandbox.resources.memory_mb", "THREADBOX_CONFIG is honoured")

	_, _, err = runMain(t, baseEnv(t, "THREADBOX_SANDBOX_RESOURCES_CPUS=99"), "doctor")
	require.ErrorContains(t, err, "sandbox.resources.cpus = 99")
}

func TestDoctorReportsDeadDockerDaemonWithFix(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "no-daemon.sock")
	out, _, err := runMain(t, baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_DOCKER_HOST="+sock), "doctor")
	require.Equal(t, exitCode(1), err, "doctor exits 1 on a problem")
	line := findLine(out, "PROBLEM docker:")
	require.NotEmpty(t, line, "one line about Docker:\n%s", out)
	require.Contains(t, line, "the Docker daemon at "+sock+" is not answering")
	require.Contains(t, line, "Fix: start the daemon")
	require.Contains(t, out, "ok      database:", "the other checks still run")
	require.Contains(t, out, "1 problem(s) found")
}

func TestDoctorReportsDeadRedisAndBadDatabase(t *testing.T) {
	env := []string{
		"THREADBOX_DATABASE_URL=postgres://threadbox:pw@127.0.0.1:1/nope?sslmode=disable&connect_timeout=2",
		"THREADBOX_REDIS_URL=redis://127.0.0.1:1/0",
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "x.sock"),
	}
	out, _, err := runMain(t, env, "doctor")
	require.Equal(t, exitCode(1), err)
	require.NotEmpty(t, findLine(out, "PROBLEM database:"), out)
	require.Contains(t, findLine(out, "PROBLEM redis:"), "127.0.0.1:1 is not answering")
	require.NotContains(t, out, "pw@", "the database password is not printed")
	require.Contains(t, out, "3 problem(s) found")
}

func TestDoctorAllGreenOnRealServices(t *testing.T) {
	requireServices(t)
	env := baseEnv(t,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE=threadbox/sandbox-test:latest",
		"THREADBOX_REDIS_URL="+envOr("THREADBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
	)
	out, _, err := runMain(t, env, "doctor")
	require.NoError(t, err, out)
	require.Contains(t, out, "ok      docker: daemon")
	require.Contains(t, out, "image threadbox/sandbox-test:latest present")
	require.Contains(t, out, "ok      redis: reachable")
}

func TestDoctorReportsMissingImage(t *testing.T) {
	requireServices(t)
	out, _, err := runMain(t, baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_IMAGE=threadbox/does-not-exist:never"), "doctor")
	require.Equal(t, exitCode(1), err)
	require.Contains(t, findLine(out, "PROBLEM docker:"), "make sandbox-image")
}

func TestMigrateTwice(t *testing.T) {
	env := baseEnv(t)
	for range 2 {
		out, _, err := runMain(t, env, "migrate")
		require.NoError(t, err)
		require.Equal(t, "migrations applied\n", out)
	}
}

func findLine(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestServeHealthAndGracefulShutdown(t *testing.T) {
	env := baseEnv(t, "THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true", "THREADBOX_SANDBOX_PROVIDER=local",
		"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true",
		"THREADBOX_SANDBOX_LOCAL_DIR="+t.TempDir())
	sv := serveInProcess(t, env)
	addr, cancel, done, m, stderr := sv.addr, sv.cancel, sv.done, sv.m, sv.stderr
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	}
	cancel() // what SIGTERM does through signal.NotifyContext
	require.NoError(t, <-done)
	require.NoError(t, m.Close())
	require.Contains(t, stderr.String(), "shutting down")
}

func TestAdminCLIIsAuditedAsTheOperator(t *testing.T) {
	env := baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=local", "THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true",
		"THREADBOX_SANDBOX_LOCAL_DIR="+t.TempDir())
	out, _, err := runMain(t, env, "admin", "sessions")
	require.NoError(t, err)
	require.Equal(t, "No sessions.\n", out)
	out, _, err = runMain(t, env, "admin", "inspect", "web:nope")
	require.Equal(t, exitCode(1), err)
	require.Contains(t, out, "inspect failed")
	out, _, err = runMain(t, env, "admin", "help")
	require.NoError(t, err)
	require.Contains(t, out, "reap [--dry-run]")

	// A target with a terminal escape and a forged line is audited escaped, on one line.
	out, _, err = runMain(t, env, "admin", "inspect", "web:\x1b[2J\nadmin destroy web:x ok")
	require.Equal(t, exitCode(1), err)
	require.Contains(t, out, "inspect failed")

	// The audit log has every command, attributed to the operator: "started" before the action, the
	// outcome after it.
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, env)
	require.NoError(t, m.ParseFlags([]string{"doctor"}))
	st, err := m.openStore(context.Background())
	require.NoError(t, err)
	entries, err := st.AuditList(context.Background(), db.AuditQuery{})
	require.NoError(t, err)
	require.NoError(t, m.Close())
	type row struct{ Action, Target, Result string }
	var got []row
	for _, e := range entries {
		require.True(t, strings.HasPrefix(e.Actor, "cli:"), e.Actor)
		require.NotContains(t, e.Target+e.Result, "\x1b", "no raw control characters")
		require.NotContains(t, e.Target+e.Result, "\n")
		result, _, _ := strings.Cut(e.Result, ":") // "error: <why>" → "error"
		got = append(got, row{e.Action, e.Target, result})
	}
	escaped := `web:\x1b[2J\nadmin destroy web:x ok`
	require.Equal(t, []row{
		{"admin inspect", escaped, "error"},
		{"admin inspect", escaped, "started"},
		{"admin inspect", "web:nope", "error"},
		{"admin inspect", "web:nope", "started"},
		{"admin sessions", "", "ok"},
		{"admin sessions", "", "started"},
	}, got)
}

func TestDoctorWarnsWhenTheModelIsUnreachable(t *testing.T) {
	env := baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_GATEWAY_ENABLED=false",
		"THREADBOX_SANDBOX_DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "x.sock"),
		"ANTHROPIC_API_KEY=sk-test-not-real-key")
	out, _, err := runMain(t, env, "doctor")
	require.Equal(t, exitCode(1), err)
	line := findLine(out, "PROBLEM runtime:")
	require.Contains(t, line, "claude-code runtime must reach its model API")
	require.Contains(t, line, "gateway.enabled: true")
	require.NotContains(t, out, "sk-test-not-real-key")

	// With the gateway (the default), network none is how it should be.
	env = baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "x.sock"),
		"ANTHROPIC_API_KEY=sk-test-not-real-key")
	out, _, _ = runMain(t, env, "doctor")
	require.NotContains(t, out, "PROBLEM runtime:")
	require.Contains(t, out, "claude-code through the model gateway")

	out, _, _ = runMain(t, baseEnv(t, "THREADBOX_RUNTIME_NAME=opencode"), "doctor")
	require.Contains(t, findLine(out, "PROBLEM runtime:"), "needs ANTHROPIC_API_KEY")
}

// inProcessServe is `threadbox serve` running in this process through Main, as the binary runs it.
type inProcessServe struct {
	m      *Main
	addr   string
	cancel context.CancelFunc // what SIGTERM does through signal.NotifyContext
	done   chan error
	stderr *bytes.Buffer
}

// serveInProcess starts serve with env and returns once it listens.
func serveInProcess(t *testing.T, env []string) inProcessServe {
	t.Helper()
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, env)
	addrc := make(chan string, 1)
	m.OnListen = func(a string) { addrc <- a }
	require.NoError(t, m.ParseFlags([]string{"serve"}))
	ctx, cancel := context.WithCancel(context.Background())
	sv := inProcessServe{m: m, cancel: cancel, done: make(chan error, 1), stderr: &stderr}
	go func() { sv.done <- m.Run(ctx) }()
	select {
	case sv.addr = <-addrc:
	case err := <-sv.done:
		cancel()
		t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
	}
	return sv
}

func TestServeOnPostgresNeedsASharedRuntimeSecret(t *testing.T) {
	// The database is not reached: the check comes first, so the message is the whole story.
	env := []string{"THREADBOX_DATABASE_URL=postgres://threadbox:pw@127.0.0.1:1/nope?sslmode=disable"}
	_, _, err := runMain(t, env, "serve")
	require.Error(t, err)
	require.Contains(t, err.Error(), "runtime.secret: required with a PostgreSQL database.url")
	require.Contains(t, err.Error(), "every replica")
	require.NotContains(t, err.Error(), "\n", "one line")
}

// TestServeOnPostgresStartupLine starts serve on the test PostgreSQL, whose user, password and
// database name are all threadbox, like the default deployment: the startup line keeps the
// deployment and the user, and hides only the password.
func TestServeOnPostgresStartupLine(t *testing.T) {
	requireServices(t)
	pg := dbtest.PostgresSchemaURL(t) // a schema of its own: other runs' migrations are not its business
	env := []string{"THREADBOX_DATABASE_URL=" + pg, "THREADBOX_RUNTIME_SECRET=" + strings.Repeat("ab", 16),
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true", "THREADBOX_SANDBOX_PROVIDER=local",
		"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true", "THREADBOX_SANDBOX_LOCAL_DIR=" + t.TempDir(),
		"THREADBOX_LOG_FORMAT=json"}
	sv := serveInProcess(t, env)
	sv.cancel()
	require.NoError(t, <-sv.done)
	require.NoError(t, sv.m.Close())
	var ready string
	for _, l := range strings.Split(sv.stderr.String(), "\n") {
		if strings.Contains(l, `"msg":"ready"`) {
			ready = l
		}
	}
	t.Log(ready)
	require.Contains(t, ready, `"deployment":"threadbox"`)
	require.Contains(t, ready, `"database":"postgres://threadbox:xxxxx@`)
	require.NotContains(t, ready, "[REDACTED]")
}

func TestFatalErrorsHideURLPasswords(t *testing.T) {
	var stderr bytes.Buffer
	m := NewMain(io.Discard, &stderr, nil)
	code := reportErr(m, errors.New(`open "postgres://tb:p%40ss@db/tb?password=hunter22": refused`))
	require.Equal(t, 1, code)
	require.Equal(t, "threadbox: open \"postgres://tb:xxxxx@db/tb?password=xxxxx\": refused\n", stderr.String())
}

func TestDoctorSaysPostgresNeedsARuntimeSecret(t *testing.T) {
	requireServices(t)
	pg := dbtest.PostgresSchemaURL(t)
	env := []string{"THREADBOX_DATABASE_URL=" + pg, "THREADBOX_SANDBOX_PROVIDER=local",
		"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true", "THREADBOX_SANDBOX_LOCAL_DIR=" + t.TempDir()}
	out, _, err := runMain(t, env, "doctor")
	require.Equal(t, exitCode(1), err)
	require.Contains(t, findLine(out, "PROBLEM database:"), "runtime.secret is empty")

	out, _, err = runMain(t, append(env, "THREADBOX_RUNTIME_SECRET="+strings.Repeat("cd", 16)), "doctor")
	require.NoError(t, err, out)
	require.Contains(t, out, "ok      database: reachable")
}

// TestDoctorRedactsSecrets: doctor's lines quote configured URLs (the gateway's upstreams, the Docker
// host); a password in one, as written or percent-encoded, or in a query string, is never printed,
// nor is a secret quoted by value.
func TestDoctorRedactsSecrets(t *testing.T) {
	tests := []struct{ name, env, secret string }{
		{"gateway upstream user-info", "THREADBOX_GATEWAY_ANTHROPIC_URL=https://proxy:hunter2-upstream@proxy.example/v1", "hunter2-upstream"},
		{"percent-encoded", "THREADBOX_GATEWAY_OPENAI_URL=https://proxy:hunter2%40pct@proxy.example/v1", "hunter2%40pct"},
		{"query password", "THREADBOX_GATEWAY_ANTHROPIC_URL=https://proxy.example/v1?password=hunter2-query", "hunter2-query"},
		{"docker host user-info", "THREADBOX_SANDBOX_DOCKER_HOST=tcp://ops:hunter2-docker@127.0.0.1:1", "hunter2-docker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := baseEnv(t, "ANTHROPIC_API_KEY=sk-ant-test-key-123456", "THREADBOX_SANDBOX_PROVIDER=docker",
				"THREADBOX_SANDBOX_DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"), tt.env)
			out, stderr, _ := runMain(t, env, "doctor")
			require.NotContains(t, out+stderr, tt.secret, out)
			require.NotContains(t, out+stderr, "sk-ant-test-key-123456", out)
		})
	}
}
