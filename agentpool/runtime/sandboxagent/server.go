package sandboxagent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/sandbox"
)

var (
	// errUnauthorized: the server refused our token (it was started with another secret).
	errUnauthorized = errors.New("sandbox-agent refused the token")
	// errWedged: the server answered its health check, but its agent did not answer initialize.
	errWedged = errors.New("the agent did not answer")
	// errNoAnswer: a health check got no answer in time.
	errNoAnswer = sandboxhttp.ErrNoAnswer
)

// Token derives the server token of one sandbox from the service secret: nothing extra is stored,
// and a leaked token opens one sandbox only.
func Token(secret, sandboxID string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("threadbox/sandbox-agent/" + sandboxID))
	return hex.EncodeToString(mac.Sum(nil))
}

// request sends one call and decodes a 2xx JSON answer into out. Failures are classified as in
// sandboxhttp.Clients.Do, with 401 as errUnauthorized.
func (r *Runtime) request(ctx context.Context, sb sandbox.Sandbox, method, path string, in, out any) (int, error) {
	req, err := sandboxhttp.NewRequest(ctx, method, "http://sandbox-agent"+path, in)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+Token(r.cfg.Secret, sb.Handle().ID))
	status, err := r.clients.Do(sb, req, out)
	if errors.Is(err, sandboxhttp.ErrUnauthorized) {
		err = errUnauthorized
	}
	if err != nil {
		return status, fmt.Errorf("sandbox-agent %s %s: %w", method, path, err)
	}
	return status, nil
}

// healthy asks the server once, within attempt.
func (r *Runtime) healthy(ctx context.Context, sb sandbox.Sandbox, attempt time.Duration) error {
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	_, err := r.request(actx, sb, http.MethodGet, "/v1/health", nil, nil)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		r.clients.Reset(sb)
		return fmt.Errorf("sandbox-agent health: %w within %s", errNoAnswer, attempt)
	}
	return err
}

// launchScript starts the server on the sandbox's loopback unless it runs already ($3 = 1 kills it
// and its agents first), detached from the exec, and prints the working directory (the agents' cwd).
// pgrep and pkill never match this shell: its command line starts with /bin/sh.
const launchScript = `bin=$1 port=$2 restart=$3 log=$4 token=$5
pwd
pat="sandbox-agent server --token [0-9a-f]+ --host 127.0.0.1 --port $port "
if [ "$restart" = 1 ]; then pkill -KILL -f "$pat"; fi
if pgrep -f "$pat" >/dev/null; then echo running; exit 0; fi
pkill -KILL -f "[o]pencode acp" # agents orphaned by a killed server ([o]: the regex does not match this line)
command -v "$bin" >/dev/null || { echo "missing"; exit 3; }
mkdir -p "$(dirname "$log")" input output/display
nohup "$bin" server --token "$token" --host 127.0.0.1 --port "$port" --no-telemetry >"$log" 2>&1 </dev/null &
echo started`

// logPath is the server's log in the sandbox, relative to the work directory's owner's home.
const logPath = "/tmp/threadbox-sandbox-agent.log"

// launch runs launchScript; it reports whether it started a new server, and the work directory.
func (r *Runtime) launch(ctx context.Context, sb sandbox.Sandbox, restart bool) (bool, string, error) {
	env, err := opencode.Env(r.cfg.Model)
	if err != nil {
		return false, "", err
	}
	env["SANDBOX_AGENT_ACP_REQUEST_TIMEOUT_MS"] = fmt.Sprint(r.cfg.RequestTimeout.Milliseconds())
	// The agents are pre-placed in the image; the installer would need the internet.
	env["SANDBOX_AGENT_REQUIRE_PREINSTALL"] = "1"
	flag := "0"
	if restart {
		flag = "1"
	}
	var out strings.Builder
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", launchScript, "sh", r.cfg.Binary, fmt.Sprint(r.cfg.Port), flag, logPath,
			Token(r.cfg.Secret, sb.Handle().ID)},
		Env:     env,
		Stdout:  &out,
		Timeout: 30 * time.Second,
	})
	r.clients.Reset(sb)
	lines := strings.Fields(out.String())
	switch {
	case err != nil:
		return false, "", fmt.Errorf("sandbox-agent: launching the server: %w", runtime.SandboxDown(err))
	case res.ExitCode == 3:
		return false, "", fmt.Errorf("sandbox-agent: %q is not installed in the sandbox image (use threadbox/sandbox, see deploy/sandbox-image)", r.cfg.Binary)
	case res.ExitCode != 0 || len(lines) < 2:
		return false, "", fmt.Errorf("sandbox-agent: launching the server exited %d: %s", res.ExitCode, strings.TrimSpace(out.String()))
	}
	return lines[len(lines)-1] == "started", lines[0], nil
}

// Ensure implements runtime.Runtime: one health call when the server is up; otherwise launch it and
// wait, backing off from 20 ms. A server with another token, or one that never becomes healthy, is
// killed and launched again, once.
func (r *Runtime) Ensure(ctx context.Context, sb sandbox.Sandbox) error {
	var wedged bool
	r.state.with(sb, func(st *sbState) { wedged = st.wedged })
	err := r.healthy(ctx, sb, 3*time.Second)
	if err == nil && !wedged {
		return nil
	}
	if err == nil {
		err = errWedged
	}
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox-agent: %w", context.Cause(ctx))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	restart := errors.Is(err, errUnauthorized) || wedged
	for round := 0; round < 2; round++ {
		started, workDir, err := r.launch(ctx, sb, restart)
		if err != nil {
			return err
		}
		r.state.setWorkDir(sb, workDir)
		if started || restart {
			r.state.forget(sb) // a new server has no ACP process and no loaded sessions
		}
		if err = sandboxhttp.WaitHealthy(ctx, started, errUnauthorized, func(ctx context.Context, attempt time.Duration) error {
			return r.healthy(ctx, sb, attempt)
		}); err == nil {
			// Healthy means ready for a turn: spawn the agent now, not in the first Session.
			return r.initialize(ctx, sb)
		}
		if ctx.Err() != nil || round == 1 {
			return fmt.Errorf("sandbox-agent: the server did not become healthy: %w (log: %s)", err, logPath)
		}
		restart = true
	}
	return nil
}
