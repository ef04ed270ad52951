package deno

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// live is an open socket to a box's running sandbox, with what we know of its deadline.
type live struct {
	id, region string
	conn       *rpcConn

	mu       sync.Mutex // protects the following
	deadline time.Time  // zero: unknown (connected, not created, by this process)
	leases   int
	stop     chan struct{} // closed when the last lease ends
}

func (p *Provider) remember(id, region string, conn *rpcConn, deadline time.Time) *live {
	lv := &live{id: id, region: region, conn: conn, deadline: deadline}
	p.mu.Lock()
	old := p.lives[id]
	p.lives[id] = lv
	p.mu.Unlock()
	if old != nil && old.conn != conn {
		old.conn.close()
	}
	return lv
}

func (p *Provider) forget(id string, lv *live) {
	p.mu.Lock()
	if p.lives[id] == lv {
		delete(p.lives, id)
	}
	p.mu.Unlock()
	lv.conn.close()
}

// liveFor returns a socket to the box's running sandbox: the one we hold, or a new connection. A
// closed socket is only a missing session: the console says whether the sandbox is still running
// (reconnect) or gone (ErrNotRunning while the box has storage, else ErrNotFound).
func (p *Provider) liveFor(ctx context.Context, h sandbox.Handle) (*live, handleState, error) {
	st, err := p.decode(h)
	if err != nil {
		return nil, st, err
	}
	p.mu.Lock()
	lv := p.lives[h.ID]
	p.mu.Unlock()
	if lv != nil && !lv.conn.closed() {
		return lv, st, nil
	}
	if lv != nil {
		p.forget(h.ID, lv)
	}
	b, err := p.find(ctx, h.ID)
	if err != nil {
		return nil, st, fmt.Errorf("deno: %s: %w", h.ID, err)
	}
	switch {
	case !b.exists():
		return nil, st, fmt.Errorf("deno: %s: %w", h.ID, sandbox.ErrNotFound)
	case b.running == nil:
		return nil, st, fmt.Errorf("deno: %s: %w", h.ID, sandbox.ErrNotRunning)
	}
	hdr := http.Header{}
	p.auth(hdr)
	u, err := p.host(b.running.Region, true, "api", "v3", "sandbox", b.running.ID, "connect")
	if err != nil {
		return nil, st, err
	}
	conn, err := p.dialRPC(ctx, "connect", u, hdr)
	if statusOf(err) == http.StatusNotFound {
		return nil, st, fmt.Errorf("deno: %s: its sandbox stopped: %w", h.ID, sandbox.ErrNotRunning)
	}
	if err != nil {
		return nil, st, err
	}
	return p.remember(h.ID, b.running.Region, conn, time.Time{}), st, nil
}

// lease keeps the sandbox alive while a command runs: it extends the deadline whenever less than
// ExtendMargin is left. The last release stops the extending. This is done here, inside Exec, rather
// than by a hook the pool calls, because every turn of the Exec-driven runtimes (shell, claude-code)
// is an Exec, and a command is exactly what must not be cut off; Lease is exported for callers that
// drive a runtime some other way.
func (p *Provider) lease(lv *live) (release func()) {
	lv.mu.Lock()
	lv.leases++
	if lv.leases == 1 {
		lv.stop = make(chan struct{})
		go p.extender(lv, lv.stop)
	}
	lv.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			lv.mu.Lock()
			defer lv.mu.Unlock()
			if lv.leases--; lv.leases == 0 {
				close(lv.stop)
			}
		})
	}
}

// Lease holds the box's sandbox alive (extending its deadline) until release is called.
func (p *Provider) Lease(ctx context.Context, h sandbox.Handle) (release func(), err error) {
	lv, _, err := p.liveFor(ctx, h)
	if err != nil {
		return nil, err
	}
	return p.lease(lv), nil
}

// minExtendWait is the least time between two extensions: if Deno grants no later deadline (or none
// at all), the extender keeps asking at this pace rather than in a tight loop.
const minExtendWait = 30 * time.Second

func (p *Provider) extender(lv *live, stop chan struct{}) {
	for asked := false; ; asked = true {
		lv.mu.Lock()
		wait := lv.deadline.Sub(p.clock.Now()) - p.opts.ExtendMargin
		lv.mu.Unlock()
		if asked { // the first extension of an unknown deadline goes at once
			wait = max(wait, minExtendWait)
		}
		select {
		case <-stop:
			return
		case <-lv.conn.done:
			return
		case <-p.clock.After(wait):
		}
		select {
		case <-stop:
			return
		default:
		}
		if err := p.extend(lv); err != nil {
			p.log.Warn("extend the sandbox's deadline", zap.String("box", lv.id), zap.Error(err))
			select { // try again soon, in real time: the clock may be a fake nobody advances
			case <-stop:
				return
			case <-lv.conn.done:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// extend asks for the full lifetime from now; Deno answers the deadline it granted.
func (p *Provider) extend(lv *live) error {
	want := p.clock.Now().Add(Lifetime)
	var got struct {
		StopAtMs int64 `json:"stop_at_ms"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.RequestTimeout)
	defer cancel()
	u, err := p.host(lv.region, false, "api", "v3", "sandbox", lv.conn.sandboxID)
	if err != nil {
		return err
	}
	_, err = p.do(ctx, "extend "+lv.conn.sandboxID, http.MethodPatch, u,
		map[string]int64{"stop_at_ms": want.UnixMilli()}, &got, true, p.opts.RequestTimeout)
	if err != nil {
		return err
	}
	if got.StopAtMs <= 0 {
		// No deadline in the answer: keep the one known (a zero would read as 1970, and Sweep would
		// pause the box at once).
		return fmt.Errorf("deno: extend %s: the answer carried no stop_at_ms", lv.conn.sandboxID)
	}
	lv.mu.Lock()
	lv.deadline = time.UnixMilli(got.StopAtMs)
	lv.mu.Unlock()
	return nil
}

// Sweep pauses every box this process holds that runs no command and has less than PauseMargin of
// its lifetime left, so that a thread never loses its running sandbox to the deadline while idle. It
// returns the boxes it paused. (A box whose deadline this process does not know is left alone: if it
// expires, Start boots its volume again.)
func (p *Provider) Sweep(ctx context.Context) ([]string, error) {
	now := p.clock.Now()
	p.mu.Lock()
	var due []string
	for id, lv := range p.lives {
		lv.mu.Lock()
		if lv.leases == 0 && !lv.deadline.IsZero() && lv.deadline.Sub(now) < p.opts.PauseMargin {
			due = append(due, id)
		}
		lv.mu.Unlock()
	}
	p.mu.Unlock()
	var errs []error
	for _, id := range due {
		if err := p.Stop(ctx, sandbox.Handle{Provider: Name, ID: id, Version: handleVersion}); err != nil {
			errs = append(errs, err)
		}
	}
	return due, errors.Join(errs...)
}

// markerEnv tags every process an exec starts, so a timeout can kill all of them (as the Docker
// provider does): Deno's processKill reaches one pid.
const markerEnv = "THREADBOX_DENO_EXEC"

type spawnResult struct {
	PID      int  `json:"pid"`
	StdoutID *int `json:"stdoutStreamId"`
	StderrID *int `json:"stderrStreamId"`
}

type waitResult struct {
	Success bool    `json:"success"`
	Code    int     `json:"code"`
	Signal  *string `json:"signal"`
}

// Exec implements sandbox.Provider: spawn over the socket with piped output, wait for the exit, and on
// a timeout or a cancelled ctx kill everything the command started.
func (p *Provider) Exec(ctx context.Context, h sandbox.Handle, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("%w: empty command", sandbox.ErrInvalidSpec)
	}
	if err := p.checkEnvValues(req.Env); err != nil {
		return sandbox.ExecResult{}, err
	}
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer p.lease(lv)()
	start := time.Now()
	marker := newMarker()
	env := maps.Clone(req.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[markerEnv] = strings.TrimPrefix(marker, markerEnv+"=")
	dir := req.Dir
	if dir == "" {
		dir = st.WorkDir
	} else if !path.IsAbs(dir) {
		dir = path.Join(st.WorkDir, dir)
	}
	stdout := sandbox.NewCappedWriter(req.Stdout, req.MaxOutput)
	stderr := sandbox.NewCappedWriter(req.Stderr, req.MaxOutput)
	params := map[string]any{"command": req.Cmd[0], "args": req.Cmd[1:], "env": env, "cwd": dir, "stdout": "piped", "stderr": "piped"}
	var pump func()
	if req.Stdin != nil {
		id, pf, err := lv.conn.startStream(req.Stdin)
		if err != nil {
			return sandbox.ExecResult{}, p.lost(ctx, h, err)
		}
		params["stdinStreamId"], pump = id, pf
	}
	sp, err := p.spawnOwned(ctx, lv, params, pump, marker)
	if err != nil {
		return sandbox.ExecResult{}, p.lost(ctx, h, fmt.Errorf("deno: spawn: %w", err))
	}
	var streams []*inStream
	if sp.StdoutID != nil {
		streams = append(streams, lv.conn.claim(*sp.StdoutID, stdout))
	}
	if sp.StderrID != nil {
		streams = append(streams, lv.conn.claim(*sp.StderrID, stderr))
	}
	waited := make(chan error, 1)
	var wr waitResult
	go func() {
		waited <- lv.conn.call(context.WithoutCancel(ctx), "processWait", map[string]int{"pid": sp.PID}, &wr, nil)
	}()

	timeout, stopTimeout := sandbox.ExecTimeout(req.Timeout)
	defer stopTimeout()
	res := sandbox.ExecResult{}
	select {
	case err = <-waited:
	case <-timeout:
		p.killExec(ctx, lv, sp.PID, marker)
		err = <-waited
		res.TimedOut = true
	case <-ctx.Done():
		p.killExec(context.WithoutCancel(ctx), lv, sp.PID, marker)
		return sandbox.ExecResult{}, ctx.Err()
	}
	if err != nil {
		return sandbox.ExecResult{}, p.lost(ctx, h, fmt.Errorf("deno: wait: %w", err))
	}
	// The output may still be in flight after the exit; a background child that keeps the pipe open
	// is not waited for beyond a grace period.
	grace := time.NewTimer(2 * time.Second)
	defer grace.Stop()
	for _, s := range streams {
		select {
		case <-s.done:
		case <-grace.C:
		}
	}
	res.ExitCode, res.Duration = wr.Code, time.Since(start)
	if res.TimedOut {
		res.ExitCode = sandbox.ExitTimeout
	}
	res.Truncated = stdout.Truncated() || stderr.Truncated()
	return res, nil
}

// lost turns a failure on a socket that closed into what the box's state says: not running, not
// found, or the error itself (the sandbox still runs: only the session was missing).
func (p *Provider) lost(ctx context.Context, h sandbox.Handle, err error) error {
	if !errors.Is(err, errConnLost) {
		return err
	}
	b, ferr := p.find(ctx, h.ID)
	switch {
	case ferr != nil:
		return err
	case !b.exists():
		return fmt.Errorf("%w: %w", err, sandbox.ErrNotFound)
	case b.running == nil:
		return fmt.Errorf("%w: %w", err, sandbox.ErrNotRunning)
	}
	return fmt.Errorf("%w: %w", err, sandbox.ErrUnavailable)
}

// RunSweeper calls Sweep every interval (by the provider's clock) until ctx ends. Every process runs
// its own: Sweep touches only the sandboxes this process holds sockets to.
func (p *Provider) RunSweeper(ctx context.Context, every time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(every):
		}
		paused, err := p.Sweep(ctx)
		if len(paused) > 0 {
			p.log.Info("paused idle sandboxes near their deadline", zap.Strings("boxes", paused))
		}
		if err != nil && ctx.Err() == nil {
			p.log.Warn("sweep", zap.Error(err))
		}
	}
}
