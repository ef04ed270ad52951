package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/toolbox"
)

// markerEnv tags every process an exec starts, so that a timeout or a cancelled ctx can kill them
// all (children that were reparented or called setsid included) from inside the sandbox. The
// toolbox has no kill for a session command's descendants.
const markerEnv = "THREADBOX_DAYTONA_EXEC"

// ensureWorkDir makes the work directory $wd on first use, with sudo where the image has it
// (Daytona's base images do): the snapshot's user owns its home, not necessarily the work directory.
// Doing it here rather than in Create saves a round trip per sandbox.
const ensureWorkDir = `[ -d "$wd" ] || mkdir -p "$wd" 2>/dev/null || { sudo -n mkdir -p "$wd" && sudo -n chown "$(id -u):$(id -g)" "$wd"; }
`

// execScript runs argv (after "--") in $3 with the environment assignments before "--" exported,
// stdin from the file $1 (removed once open) or /dev/null, after making the work directory $2. It
// runs in a subshell of the session's shell (see execLine), so its exec ends only the subshell.
const execScript = `in=$1; wd=$2; dir=$3; shift 3
` + ensureWorkDir + `if [ -n "$in" ]; then exec <"$in"; rm -f "$in"; else exec </dev/null; fi
cd "$dir" || exit 1
while [ $# -gt 0 ]; do [ "$1" = -- ] && { shift; break; }; export "$1"; shift; done
exec "$@"`

// execLine is the session command: execScript in a subshell with its arguments set. A subshell
// forks where sh -c would also exec a shell binary: less work per exec.
func execLine(args []string) string {
	return "(set -- " + shellJoin(args) + "\n" + execScript + "\n)"
}

// Exec implements sandbox.Provider. The command runs in a toolbox session of its own, started
// asynchronously; its output streams over the logs WebSocket, split into stdout and stderr by the
// daemon's markers and bounded per stream; its exit code comes from the session command. Stdin, when
// given, is uploaded to a temporary file first (the toolbox has no way to close a command's input).
func (p *Provider) Exec(ctx context.Context, h sandbox.Handle, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	if len(req.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("exec: empty command: %w", sandbox.ErrInvalidSpec)
	}
	if req.User != "" {
		return sandbox.ExecResult{}, fmt.Errorf("exec as %q: Daytona runs commands as the sandbox's user: %w", req.User, sandbox.ErrUnsupported)
	}
	dir := req.Dir
	switch {
	case dir == "":
		dir = st.WorkDir
	case !path.IsAbs(dir):
		dir = path.Join(st.WorkDir, dir)
	}
	if err := p.checkEnvValues(req.Env); err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	marker := randomID()
	env := []string{markerEnv + "=" + marker}
	for k, v := range req.Env {
		if err := sandbox.ValidateEnvName(k); err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("exec: %w: %w", sandbox.ErrInvalidSpec, err)
		}
		env = append(env, k+"="+v)
	}
	sort.Strings(env[1:])
	tb, err := p.toolbox(ctx, h, st)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	start := time.Now()

	// The session first: a sandbox that is not running refuses it, before any of Stdin is read (the
	// runtimes take a read stdin as "the command may have got its input").
	sid := "threadbox-" + marker
	if err := p.tbCallIdempotent(ctx, h, "create session", true, func(ctx context.Context) (*http.Response, error) {
		return tb.c.CreateSession(ctx, toolbox.CreateSessionRequest{SessionId: sid})
	}, nil); err != nil {
		return sandbox.ExecResult{}, err
	}
	defer func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		if err := p.tbCallIdempotent(cctx, h, "delete session", false, func(ctx context.Context) (*http.Response, error) {
			return tb.c.DeleteSession(ctx, sid)
		}, nil); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			p.log.Debug("delete session failed")
		}
	}()

	in := ""
	if req.Stdin != nil {
		in = "/tmp/.threadbox-stdin-" + marker
		if err := p.upload(ctx, h, tb, in, req.Stdin); err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("exec: stdin: %w", err)
		}
	}
	started := false // once the command runs, it removes the stdin file itself
	defer func() {
		if in != "" && !started {
			cctx, cancel := cleanupCtx(ctx)
			defer cancel()
			_, _, _ = p.run(cctx, h, `rm -f "$1"`, in)
		}
	}()
	args := append(append([]string{in, st.WorkDir, dir}, env...), "--")
	line := execLine(append(args, req.Cmd...))
	var cmd toolbox.SessionExecuteResponse
	if err := p.tbCall(ctx, h, "exec", func(ctx context.Context) (*http.Response, error) {
		return tb.c.SessionExecuteCommand(ctx, sid, toolbox.SessionExecuteRequest{Command: line, RunAsync: ptr(true)})
	}, &cmd); err != nil {
		return sandbox.ExecResult{}, err
	}
	started = true
	kill := func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		if err := p.killTagged(cctx, h, marker); err != nil {
			p.log.Warn("exec kill failed")
		}
	}

	stdout := sandbox.NewCappedWriter(req.Stdout, req.MaxOutput)
	stderr := sandbox.NewCappedWriter(req.Stderr, req.MaxOutput)
	ws, err := p.followLogs(ctx, tb, sid, cmd.CmdId)
	if err != nil {
		kill()
		return sandbox.ExecResult{}, p.classify(ctx, h, fmt.Errorf("exec: logs: %w", err))
	}
	defer ws.Close()
	copied := make(chan error, 1)
	go func() { copied <- demuxStream(ws, stdout, stderr) }()

	timeout, stopTimeout := sandbox.ExecTimeout(req.Timeout)
	defer stopTimeout()
	res := sandbox.ExecResult{}
	select {
	case err = <-copied:
	case <-timeout:
		res.TimedOut = true
		kill()
		_, err = sandbox.DrainAfterKill(copied, ws, sandbox.DrainGrace)
	case <-ctx.Done():
		kill()
		_ = ws.Close()
		<-copied
		return sandbox.ExecResult{Duration: time.Since(start)}, fmt.Errorf("exec in %s: %w", h.ID, context.Cause(ctx))
	}
	res.Truncated = stdout.Truncated() || stderr.Truncated()
	if err != nil {
		kill()
		res.Duration = time.Since(start)
		return res, p.classify(ctx, h, fmt.Errorf("exec in %s: reading output: %w", h.ID, err))
	}
	if !res.TimedOut {
		code, err := p.exitCode(ctx, h, tb, sid, cmd.CmdId, timeout)
		switch {
		case errors.Is(err, errTimedOut):
			res.TimedOut = true
			kill()
		case err != nil:
			if ctx.Err() != nil {
				kill()
			}
			return res, err
		}
		res.ExitCode = code
	}
	if res.TimedOut {
		res.ExitCode = sandbox.ExitTimeout
	}
	res.Duration = time.Since(start)
	return res, nil
}

var errTimedOut = errors.New("timed out")

// exitCode reads the command's exit code. The stream ends as the command exits, a moment before the
// daemon may record the code, so it polls with a backoff from 5 ms, bounded by timeout and ctx.
func (p *Provider) exitCode(ctx context.Context, h sandbox.Handle, tb toolboxClient, sid, cid string, timeout <-chan time.Time) (int, error) {
	b := newBackoff(5*time.Millisecond, 2, time.Second)
	for {
		var c toolbox.Command
		if err := p.tbCallIdempotent(ctx, h, "command status", false, func(ctx context.Context) (*http.Response, error) {
			return tb.c.GetSessionCommand(ctx, sid, cid)
		}, &c); err != nil {
			return 0, err
		}
		if c.ExitCode != nil {
			return *c.ExitCode, nil
		}
		t := time.NewTimer(b.delay(0))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("exec: waiting for the exit code: %w", context.Cause(ctx))
		case <-timeout:
			t.Stop()
			return 0, errTimedOut
		case <-t.C:
		}
	}
}

// maxLogMessage bounds one message of the logs socket, which carries what the sandbox prints:
// the output is capped where it is kept, but a message is read whole before that.
const maxLogMessage = 64 << 20

// followLogs opens the command's logs WebSocket with follow=true (same headers as every call).
func (p *Provider) followLogs(ctx context.Context, tb toolboxClient, sid, cid string) (*websocket.Conn, error) {
	req, err := toolbox.NewGetSessionCommandLogsRequest(tb.c.Server, sid, cid, &toolbox.GetSessionCommandLogsParams{Follow: ptr(true)})
	if err != nil {
		return nil, err
	}
	u := req.URL
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	hdr := http.Header{}
	_ = p.headers(ctx, &http.Request{Header: hdr}) // the same headers as every call: it cannot fail
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, u.String(), hdr)
	if err != nil {
		if resp != nil {
			return nil, decode("logs", resp, nil)
		}
		return nil, err
	}
	conn.SetReadLimit(maxLogMessage)
	return conn, nil
}

// demuxStream splits the logs stream: 0x01×3 switches to stdout, 0x02×3 to stderr (a marker may be
// split across messages). It returns nil when the server closes normally.
func demuxStream(ws *websocket.Conn, stdout, stderr io.Writer) error {
	d := demux{cur: stdout, out: stdout, err: stderr}
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			d.flush()
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return err
		}
		d.write(msg)
	}
}

type demux struct {
	cur, out, err io.Writer
	pending       []byte // up to two marker bytes at the end of the previous message
}

func (d *demux) write(p []byte) {
	buf := p
	if len(d.pending) > 0 {
		buf = append(d.pending, p...)
		d.pending = nil
	}
	start := 0
	for i := 0; i < len(buf); i++ {
		c := buf[i]
		if c != 1 && c != 2 {
			continue
		}
		n := 0
		for n < 3 && i+n < len(buf) && buf[i+n] == c {
			n++
		}
		switch {
		case n == 3:
			_, _ = d.cur.Write(buf[start:i])
			d.cur = d.out
			if c == 2 {
				d.cur = d.err
			}
			i += 2
			start = i + 1
		case i+n == len(buf): // maybe a marker cut by the message boundary
			_, _ = d.cur.Write(buf[start:i])
			d.pending = append([]byte(nil), buf[i:]...)
			return
		}
	}
	_, _ = d.cur.Write(buf[start:])
}

func (d *demux) flush() {
	if len(d.pending) > 0 {
		_, _ = d.cur.Write(d.pending)
		d.pending = nil
	}
}

// killTagged kills every process carrying marker from inside the sandbox, in rounds: stop then kill
// what the previous round found, and list the survivors, until none is left.
func (p *Provider) killTagged(ctx context.Context, h sandbox.Handle, marker string) error {
	var pids []string
	for range 30 {
		out, code, err := p.run(ctx, h, killRound, append([]string{markerEnv + "=" + marker}, pids...)...)
		if err != nil {
			return err
		}
		if code > 2 {
			return fmt.Errorf("exec kill in %s: exit %d: %s", h.ID, code, out)
		}
		pids = pids[:0]
		for _, f := range strings.Fields(out) {
			if pid, ok := strings.CutSuffix(strings.TrimPrefix(f, "/proc/"), "/environ"); ok {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return nil
		}
	}
	return fmt.Errorf("exec kill in %s: processes still alive: %v", h.ID, pids)
}

// killRound: builtins and exec only, so it works when the sandbox cannot fork much.
const killRound = `m=$1; shift
[ $# -eq 0 ] || { kill -STOP "$@"; kill -KILL "$@"; } 2>/dev/null
exec grep -lszxF "$m" /proc/[0-9]*/environ`

// run executes one of the provider's own scripts with process/execute (one request; output combined)
// and returns its output and exit code.
func (p *Provider) run(ctx context.Context, h sandbox.Handle, script string, args ...string) (string, int, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return "", 0, err
	}
	tb, err := p.toolbox(ctx, h, st)
	if err != nil {
		return "", 0, err
	}
	var res toolbox.ExecuteResponse
	cmd := shellJoin(append([]string{"sh", "-c", script, "sh"}, args...))
	err = p.tbCall(ctx, h, "execute", func(ctx context.Context) (*http.Response, error) {
		return tb.c.ExecuteCommand(ctx, toolbox.ExecuteRequest{Command: cmd, Timeout: ptr(60)})
	}, &res)
	if err != nil {
		return "", 0, err
	}
	code := -1
	if res.ExitCode != nil {
		code = *res.ExitCode
	}
	return res.Result, code, nil
}

// toolboxClient is the generated client bound to one sandbox's toolbox base URL.
type toolboxClient struct {
	c    *toolbox.Client
	base string
}

// toolbox returns the client for h: {toolboxProxyUrl}/{sandboxId}, with the proxy URL from the
// handle, else the sandbox, else GET /sandbox/{id}/toolbox-proxy-url.
func (p *Provider) toolbox(ctx context.Context, h sandbox.Handle, st handleState) (toolboxClient, error) {
	proxy := st.Toolbox
	if proxy == "" {
		sb, err := p.get(ctx, h.ID)
		if err != nil {
			return toolboxClient{}, err
		}
		if proxy, err = p.toolboxURL(ctx, h.ID, sb.ToolboxProxyUrl); err != nil {
			return toolboxClient{}, err
		}
	}
	if err := toolboxTrusted(p.opts.APIURL, proxy); err != nil {
		return toolboxClient{}, err
	}
	base := strings.TrimSuffix(proxy, "/") + "/" + url.PathEscape(h.ID) // the id is the API's: keep it one segment
	c, err := toolbox.NewClient(base, toolbox.WithHTTPClient(p.hc), toolbox.WithRequestEditorFn(p.headers))
	if err != nil {
		return toolboxClient{}, fmt.Errorf("daytona toolbox %q: %w", base, err)
	}
	return toolboxClient{c: c, base: base}, nil
}

// toolboxURL returns fromSandbox, or when the sandbox object had none, asks the API.
func (p *Provider) toolboxURL(ctx context.Context, id, fromSandbox string) (string, error) {
	if fromSandbox != "" {
		return fromSandbox, nil
	}
	var u api.ToolboxProxyUrl
	err := p.call(ctx, "toolbox url", func(ctx context.Context) (*http.Response, error) {
		return p.api.GetToolboxProxyUrl(ctx, id, nil)
	}, &u)
	return u.Url, err
}

// tbCall sends one toolbox request (not retried: most are not idempotent) and classifies a failure.
func (p *Provider) tbCall(ctx context.Context, h sandbox.Handle, op string, send func(ctx context.Context) (*http.Response, error), out any) error {
	resp, err := send(ctx)
	if err != nil {
		return p.classify(ctx, h, fmt.Errorf("daytona toolbox %s: %w", op, err))
	}
	if err := decode("toolbox "+op, resp, out); err != nil {
		return p.classify(ctx, h, err)
	}
	return nil
}

// tbCallIdempotent is tbCall for requests that may be repeated (a session by its ID, a command's
// status, a session's removal): 429 and 5xx are retried with backoff. conflictOK treats a 409 as
// success (the session exists: an earlier attempt made it).
func (p *Provider) tbCallIdempotent(ctx context.Context, h sandbox.Handle, op string, conflictOK bool, send func(ctx context.Context) (*http.Response, error), out any) error {
	b := newBackoff(50*time.Millisecond, 2, 2*time.Second)
	for attempt := 0; ; attempt++ {
		resp, err := send(ctx)
		if err == nil {
			err = decode("toolbox "+op, resp, out)
		} else {
			err = fmt.Errorf("daytona toolbox %s: %w", op, err)
		}
		status := statusOf(err)
		switch {
		case err == nil, conflictOK && attempt > 0 && status == http.StatusConflict:
			return nil
		case retryable(status) && attempt < 6:
			if werr := b.wait(ctx, retryAfter(err)); werr != nil {
				return fmt.Errorf("%w (last: %w)", werr, err)
			}
		default:
			return p.classify(ctx, h, err)
		}
	}
}

// classify explains a failed toolbox call by the sandbox's state: gone (ErrNotFound, so the caller
// recreates), or not started (ErrNotRunning); otherwise err as it is. A 404 from the toolbox alone is
// not trusted to mean the sandbox: it may be a missing session or file.
func (p *Provider) classify(ctx context.Context, h sandbox.Handle, err error) error {
	if ctx.Err() != nil {
		return err
	}
	sb, gerr := p.get(ctx, h.ID)
	switch {
	case errors.Is(gerr, sandbox.ErrNotFound) || (gerr == nil && gone(sb.State)):
		return fmt.Errorf("%w: %w", sandbox.ErrNotFound, stripNotFound(err))
	case gerr == nil && sb.State != nil && *sb.State != api.SandboxStateStarted:
		return fmt.Errorf("%w (sandbox is %s): %w", sandbox.ErrNotRunning, *sb.State, stripNotFound(err))
	}
	return stripNotFound(err)
}

// stripNotFound keeps a toolbox 404 from reading as a missing sandbox.
func stripNotFound(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return errors.New(err.Error())
	}
	return err
}

// shellJoin quotes argv for a POSIX shell.
func shellJoin(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}

// toolboxTrusted refuses a toolbox URL the API key should not be sent to. The URL comes from the
// API's answers (and handles recorded from them), and every toolbox request carries the key: an
// answer naming another site (a compromised or misconfigured endpoint, a proxy rewriting bodies)
// would hand that site the organisation's key. The toolbox must be on the API's host or under
// its parent domain (app.daytona.io's toolbox is proxy.app.daytona.io), over https unless the API
// itself is plain http (a local install, the tests), and carry no user info.
func toolboxTrusted(apiURL, toolboxURL string) error {
	api, err := url.Parse(apiURL)
	if err != nil {
		return fmt.Errorf("daytona: API URL: %w", err)
	}
	tb, err := url.Parse(toolboxURL)
	quoted := "(unparsable)"
	if err == nil {
		quoted = tb.Redacted()
	}
	refuse := func(why string) error {
		return fmt.Errorf("daytona: not sending the API key to toolbox URL %q: %s", sandbox.ClipText(quoted, 200), why)
	}
	switch {
	case err != nil:
		return refuse("not a URL")
	case tb.User != nil:
		return refuse("it carries user info")
	case tb.Scheme != "https" && (tb.Scheme != "http" || api.Scheme != "http"):
		return refuse("not https")
	}
	host := strings.TrimSuffix(strings.ToLower(tb.Hostname()), ".")
	apiHost := strings.TrimSuffix(strings.ToLower(api.Hostname()), ".")
	if host == "" {
		return refuse("no host")
	}
	if host == apiHost {
		return nil
	}
	domain := apiHost
	if labels := strings.Split(apiHost, "."); len(labels) >= 3 && net.ParseIP(apiHost) == nil {
		domain = strings.Join(labels[1:], ".")
	}
	if net.ParseIP(apiHost) == nil && (host == domain || strings.HasSuffix(host, "."+domain)) {
		return nil
	}
	return refuse("not on the API's host " + apiHost + " or under " + domain)
}
