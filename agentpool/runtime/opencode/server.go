package opencode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/sandbox"
)

var (
	// errUnauthorized: the server refused our password (it was started with another secret).
	errUnauthorized = errors.New("opencode server refused the password")
	// errNoAnswer: a health check got no answer in time.
	errNoAnswer = errors.New("no answer")
)

// request sends one call to the server in sb and decodes a 2xx JSON answer into out. Failures are
// classified as in sandboxhttp.Clients.Do, with 401 as errUnauthorized.
func (r *Runtime) request(ctx context.Context, sb sandbox.Sandbox, method, path string, in, out any) (int, error) {
	req, err := sandboxhttp.NewRequest(ctx, method, "http://opencode"+path, in)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth(username, Password(r.cfg.Secret, sb.Handle().ID))
	status, err := r.clients.Do(sb, req, out)
	if errors.Is(err, sandboxhttp.ErrUnauthorized) {
		err = errUnauthorized
	}
	if err != nil {
		return status, fmt.Errorf("opencode %s %s: %w", method, path, err)
	}
	return status, nil
}

// healthy asks the server once. The attempt is bounded on its own: opencode accepts connections a
// moment before it is ready, and a request that arrives in that window is never answered.
func (r *Runtime) healthy(ctx context.Context, sb sandbox.Sandbox, attempt time.Duration) error {
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	var h struct {
		Healthy bool `json:"healthy"`
	}
	_, err := r.request(actx, sb, http.MethodGet, "/global/health", nil, &h)
	if err != nil {
		if ctx.Err() == nil && actx.Err() != nil {
			r.clients.Reset(sb)
			return fmt.Errorf("opencode health: %w within %s", errNoAnswer, attempt)
		}
		return err
	}
	if !h.Healthy {
		return errors.New("opencode health: server says it is not healthy")
	}
	return nil
}

// launchScript starts `opencode serve` on the sandbox's loopback unless it runs already ($3 = 1 kills
// it first). The server is detached from the exec (nohup, output to a log, stdin closed) so that the
// exec returns at once. pgrep and pkill never match this shell: its command line starts with /bin/sh.
const launchScript = `bin=$1 port=$2 restart=$3 log=$4
pat="opencode serve --port $port "
if [ "$restart" = 1 ]; then pkill -KILL -f "$pat"; fi
if pgrep -f "$pat" >/dev/null; then echo running; exit 0; fi
command -v "$bin" >/dev/null || { echo "missing"; exit 3; }
mkdir -p "$(dirname "$log")" input output/display
nohup "$bin" serve --port "$port" --hostname 127.0.0.1 >"$log" 2>&1 </dev/null &
echo started`

// launch runs launchScript and reports whether it started a new server.
func (r *Runtime) launch(ctx context.Context, sb sandbox.Sandbox, restart bool) (bool, error) {
	env, err := Env(r.cfg.Model)
	if err != nil {
		return false, err
	}
	env["OPENCODE_SERVER_USERNAME"] = username
	env["OPENCODE_SERVER_PASSWORD"] = Password(r.cfg.Secret, sb.Handle().ID)
	flag := "0"
	if restart {
		flag = "1"
	}
	var out strings.Builder
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Cmd:     []string{"/bin/sh", "-c", launchScript, "sh", r.cfg.Binary, fmt.Sprint(r.cfg.Port), flag, logPath},
		Env:     env,
		Stdout:  &out,
		Timeout: 30 * time.Second,
	})
	r.clients.Reset(sb)
	switch {
	case err != nil:
		return false, fmt.Errorf("opencode: launching the server: %w", sandboxDown(err))
	case res.ExitCode == 3:
		return false, fmt.Errorf("opencode: %q is not installed in the sandbox image (use threadbox/sandbox, see deploy/sandbox-image)", r.cfg.Binary)
	case res.ExitCode != 0:
		return false, fmt.Errorf("opencode: launching the server exited %d: %s", res.ExitCode, strings.TrimSpace(out.String()))
	}
	return strings.TrimSpace(out.String()) == "started", nil
}

// logPath is the server's log in the sandbox, replaced at each launch.
const logPath = ".cache/threadbox/opencode.log"

// Ensure implements runtime.Runtime: one health call when the server is up; otherwise launch it and
// wait for it, backing off from 20 ms. A server that answers with another password (the secret
// changed) or never becomes healthy is killed and launched again, once.
func (r *Runtime) Ensure(ctx context.Context, sb sandbox.Sandbox) error {
	err := r.healthy(ctx, sb, 3*time.Second)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("opencode: %w", context.Cause(ctx))
	}
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	restart := errors.Is(err, errUnauthorized)
	for round := 0; round < 2; round++ {
		started, err := r.launch(ctx, sb, restart)
		if err != nil {
			return err
		}
		err = r.waitHealthy(ctx, sb, started)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || round == 1 {
			return fmt.Errorf("opencode: the server did not become healthy: %w (log: ~/%s)", err, logPath)
		}
		restart = true
	}
	return nil
}

// startupGrace is how long a server we did not start ourselves may take to become healthy before it
// is considered hung and restarted.
const startupGrace = 45 * time.Second

// waitHealthy polls health with a backoff from 20 ms to 500 ms. Each attempt is bounded (0.5 s, doubled
// after an attempt that got no answer), since a request that lands while the server is starting may
// never be answered.
func (r *Runtime) waitHealthy(ctx context.Context, sb sandbox.Sandbox, started bool) error {
	wctx := ctx
	if !started {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, startupGrace)
		defer cancel()
	}
	delay, attempt := 20*time.Millisecond, 500*time.Millisecond
	for {
		err := r.healthy(wctx, sb, attempt)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errUnauthorized):
			return err
		case wctx.Err() != nil:
			return err
		case errors.Is(err, errNoAnswer):
			// Hung in the startup window, or the machine is slow: allow more next time.
			attempt = min(attempt*2, 5*time.Second)
		}
		t := time.NewTimer(delay)
		select {
		case <-wctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(delay*3/2, 500*time.Millisecond)
	}
}

// sandboxDown marks a failure to reach the sandbox at all, unless the caller gave up.
func sandboxDown(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runtime.ErrSandboxDown) {
		return err
	}
	return fmt.Errorf("%w: %w", runtime.ErrSandboxDown, err)
}
