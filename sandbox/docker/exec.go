package docker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// markerEnv tags every process an exec starts. Killing by tag rather than by pid or process group
// reaches children that were reparented to init, that called setsid, or that daemonized: they all
// inherit the environment. (A process that wipes its own environment escapes; none of the agent
// runtimes do.) Docker itself cannot kill an exec: it has no API for it, and ExecInspect's pid is a
// host pid, useless with a remote engine.
const markerEnv = "THREADBOX_EXEC"

// Exec implements sandbox.Provider. Output is demultiplexed and streamed as it arrives, each stream
// bounded by MaxOutput (the rest is drained and dropped). On timeout or ctx end, every process the
// command started is killed from inside the container before Exec returns.
func (p *Provider) Exec(ctx context.Context, h sandbox.Handle, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	if len(req.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("exec: empty command: %w", sandbox.ErrInvalidSpec)
	}
	if req.Dir != "" && !path.IsAbs(req.Dir) && st.WorkDir == "" {
		if st, err = p.meta(ctx, h); err != nil {
			return sandbox.ExecResult{}, err
		}
	}
	user, dir := req.User, req.Dir
	if user == "" {
		user = st.User // empty: the container's user
	}
	switch {
	case dir == "":
		dir = st.WorkDir // empty: the container's working directory
	case !path.IsAbs(dir):
		dir = path.Join(st.WorkDir, dir)
	}
	env := make([]string, 0, len(req.Env)+1)
	for k, v := range req.Env {
		if err := sandbox.ValidateEnvName(k); err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("exec: %w: %w", sandbox.ErrInvalidSpec, err)
		}
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	marker := rand.Text()
	env = append(env, markerEnv+"="+marker)

	max := req.MaxOutput
	if max <= 0 {
		max = sandbox.DefaultMaxOutput
	}
	stdout := &boundedWriter{w: req.Stdout, left: max}
	stderr := &boundedWriter{w: req.Stderr, left: max}
	start := time.Now()

	created, err := p.cli.ContainerExecCreate(ctx, h.ID, container.ExecOptions{
		User: user, WorkingDir: dir, Env: env, Cmd: req.Cmd,
		AttachStdin: req.Stdin != nil, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return sandbox.ExecResult{}, wrapErr("exec in "+h.ID, err)
	}
	kill := func() {
		// The caller's ctx may be what ended: kill under a context of our own.
		_ = p.bestEffort(ctx, "kill exec", func(ctx context.Context) error { return p.killTagged(ctx, h.ID, user, marker) })
	}
	resp, err := p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		kill() // attaching starts the process: it may be running although the request failed
		return sandbox.ExecResult{}, wrapErr("exec start in "+h.ID, err)
	}
	defer resp.Close()

	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, resp.Reader)
		copied <- err
	}()
	if req.Stdin != nil {
		// Not waited for: a Stdin that never returns from Read must not hold Exec. Closing resp
		// ends it at its next write.
		go func() {
			_, _ = io.Copy(resp.Conn, req.Stdin)
			_ = resp.CloseWrite()
		}()
	}
	timeout, stopTimeout := sandbox.ExecTimeout(req.Timeout)
	defer stopTimeout()

	res := sandbox.ExecResult{}
	select {
	case err = <-copied:
	case <-timeout:
		res.TimedOut = true
		kill()
		err = p.drain(copied, resp.Conn)
	case <-ctx.Done():
		kill()
		resp.Close()
		<-copied
		return sandbox.ExecResult{Duration: time.Since(start)}, fmt.Errorf("exec in %s: %w", h.ID, context.Cause(ctx))
	}
	res.Duration = time.Since(start)
	res.Truncated = stdout.truncated || stderr.truncated
	if err != nil {
		kill()
		return res, fmt.Errorf("exec in %s: reading output: %w", h.ID, err)
	}
	if !res.TimedOut {
		// The stream has ended, but a command that closed its stdout and stderr may still run: its
		// exit is still bounded by the timeout and ctx.
		res.ExitCode, err = p.exitCode(ctx, created.ID, timeout)
		switch {
		case errors.Is(err, errTimedOut):
			res.TimedOut = true
			kill()
		case err != nil:
			if ctx.Err() != nil {
				kill()
			}
			return res, fmt.Errorf("exec in %s: %w", h.ID, err)
		}
		res.Duration = time.Since(start)
	}
	if res.TimedOut {
		res.ExitCode = sandbox.ExitTimeout
	}
	if werr := errors.Join(stdout.err, stderr.err); werr != nil {
		return res, fmt.Errorf("exec in %s: delivering output: %w", h.ID, werr)
	}
	return res, nil
}

// drain waits for the output stream to end after a kill (sandbox.DrainAfterKill), noting a stream
// that had to be cut.
func (p *Provider) drain(copied <-chan error, conn io.Closer) error {
	cut, err := sandbox.DrainAfterKill(copied, conn, sandbox.DrainGrace)
	if cut {
		p.log.Warn("exec output still open after kill; closing it")
	}
	return err
}

// errTimedOut is exitCode's report that the timeout fired first.
var errTimedOut = errors.New("timed out")

// exitCode waits for the exec to exit and returns its status. The stream usually ends as the
// process exits, a moment before the daemon records it, so polling starts at 1 ms and backs off.
// timeout (nil: none) and ctx bound the wait.
func (p *Provider) exitCode(ctx context.Context, execID string, timeout <-chan time.Time) (int, error) {
	delay := time.Millisecond
	for {
		ins, err := p.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, wrapErr("exec inspect", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, context.Cause(ctx)
		case <-timeout:
			t.Stop()
			return 0, errTimedOut
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// killTagged kills every process carrying marker, as user, from inside the container, in rounds of
// one exec each: the shell's builtin kill stops, then kills, the pids the previous round found, and
// exec grep lists the survivors; it ends when a round finds none. Stopping all of them before
// killing any means none can fork a replacement meanwhile. Nothing here forks inside the container,
// so it works when a fork bomb has exhausted the pids limit: an exec'd process is moved into the
// container's cgroup, not forked there, and the pids limit allows that.
func (p *Provider) killTagged(ctx context.Context, id, user, marker string) error {
	var pids []string
	failures, delay := 0, 10*time.Millisecond
	for range 60 {
		cmd := append([]string{"/bin/sh", "-c", killRound, "sh", markerEnv + "=" + marker}, pids...)
		out, code, err := p.execInternal(ctx, id, user, cmd)
		if nothingToKill(err) {
			return nil
		}
		// grep exits 0 (found some), 1 (none left) or 2 (another user's environ was unreadable): its
		// list is good. Anything else is the exec failing to start, which runc does for a while when
		// the pids limit is exhausted: try again, keeping the pids to kill.
		if err != nil || code > 2 {
			if failures++; failures > 10 || ctx.Err() != nil {
				return fmt.Errorf("exec kill in %s: exit %d: %w", id, code, errors.Join(err, ctx.Err()))
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			delay = min(2*delay, time.Second)
			continue
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
	p.log.Warn("exec kill did not finish", zap.String("container", id), zap.Strings("pids", pids))
	return fmt.Errorf("exec kill in %s: processes still alive after 60 rounds: %v", id, pids)
}

// nothingToKill reports an exec refused because the container is gone or stopped: it has no
// process left, and asking again cannot change that. (A paused container's processes are only frozen:
// that is not this.)
func nothingToKill(err error) bool {
	return errors.Is(err, sandbox.ErrNotFound) ||
		errors.Is(err, sandbox.ErrNotRunning) && !strings.Contains(err.Error(), "is paused")
}

// killRound is one round: builtins and exec only (zombies have an empty environ and do not match).
const killRound = `m=$1; shift
[ $# -eq 0 ] || { kill -STOP "$@"; kill -KILL "$@"; } 2>/dev/null
exec grep -lszxF "$m" /proc/[0-9]*/environ`

// execInternal runs one of the provider's own commands and returns its bounded stdout.
func (p *Provider) execInternal(ctx context.Context, id, user string, cmd []string) (string, int, error) {
	created, err := p.cli.ContainerExecCreate(ctx, id, container.ExecOptions{User: user, Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", 0, wrapErr("exec", err)
	}
	resp, err := p.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", 0, wrapErr("exec", err)
	}
	defer resp.Close()
	// The client stops watching ctx once the stream is hijacked: a stream that stays open without
	// data (a remote engine cut off, a hung daemon) would hold the kill, and so Exec, for ever.
	stop := context.AfterFunc(ctx, resp.Close)
	defer stop()
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&boundedWriter{w: &out, left: 1 << 20}, io.Discard, resp.Reader); err != nil {
		if ctx.Err() != nil {
			return "", 0, fmt.Errorf("exec: reading output: %w", context.Cause(ctx))
		}
		return "", 0, fmt.Errorf("exec: reading output: %w", err)
	}
	code, err := p.exitCode(ctx, created.ID, nil)
	return out.String(), code, err
}

// boundedWriter delivers at most left bytes to w and swallows the rest, so the stream keeps draining
// and the command never blocks on a full pipe. A failing w is remembered, not returned, for the same
// reason. It is used by one goroutine at a time (the copier, then Exec after the copier is done).
type boundedWriter struct {
	w         io.Writer
	left      int64
	truncated bool
	err       error
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	n := len(p)
	if int64(len(p)) > b.left {
		p = p[:b.left]
		b.truncated = true
	}
	b.left -= int64(len(p))
	if len(p) > 0 && b.w != nil && b.err == nil {
		if _, err := b.w.Write(p); err != nil {
			b.err = err
		}
	}
	return n, nil
}
