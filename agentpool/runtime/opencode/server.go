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
	// errWedged: the server answers its health check but left a call unanswered.
	errWedged = errors.New("opencode server left a call unanswered")
	// errNoAnswer: a health check got no answer in time.
	errNoAnswer = sandboxhttp.ErrNoAnswer
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
		return false, fmt.Errorf("opencode: launching the server: %w", runtime.SandboxDown(err))
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
	// A server whose health check passes may still leave calls unanswered (a wedged session loop):
	// one that did is restarted, or every turn would wait out the header timeout again.
	wedged := r.clients.Unanswered(sb)
	err := r.healthy(ctx, sb, 3*time.Second)
	if err == nil && !wedged {
		return nil
	}
	if err == nil {
		err = errWedged
	}
	if ctx.Err() != nil {
		return fmt.Errorf("opencode: %w", context.Cause(ctx))
	}
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	restart := errors.Is(err, errUnauthorized) || wedged
	for round := 0; round < 2; round++ {
		started, err := r.launch(ctx, sb, restart)
		if err != nil {
			return err
		}
		if restart {
			r.clients.Answered(sb)
		}
		err = sandboxhttp.WaitHealthy(ctx, started, errUnauthorized, func(ctx context.Context, attempt time.Duration) error {
			return r.healthy(ctx, sb, attempt)
		})
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
