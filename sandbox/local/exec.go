package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// Exec implements sandbox.Provider. Commands run as host processes in their own process group, so a
// timeout or Stop kills the command and everything it started.
func (p *Provider) Exec(ctx context.Context, h sandbox.Handle, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	m, err := p.readMeta(h.ID)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	if m.State != sandbox.StateRunning {
		return sandbox.ExecResult{}, fmt.Errorf("local exec in %s (%s): %w", h.ID, m.State, sandbox.ErrNotRunning)
	}
	if len(req.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("local exec: %w: empty command", sandbox.ErrInvalidSpec)
	}
	root := p.Root(h)
	dir := req.Dir
	if dir == "" {
		dir = m.WorkDir
	} else if !path.IsAbs(dir) {
		dir = path.Join(m.WorkDir, dir)
	}
	hostDir := filepath.Join(root, filepath.FromSlash(path.Clean(dir)))
	home := filepath.Join(root, filepath.FromSlash(m.WorkDir))

	cmd := exec.Command(req.Cmd[0], req.Cmd[1:]...)
	cmd.Dir = hostDir
	// Only the sandbox's own environment, never the host's: the bot's tokens live in the host's.
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": home, "LANG": "C.UTF-8"}
	for k, v := range m.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	// Every process the command starts inherits this marker, even after setsid or daemonizing, so a
	// timeout can find and kill all of them (a process group alone misses a new session).
	marker := execMarker + "=" + randomID()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, marker)
	stdout := sandbox.NewCappedWriter(req.Stdout, req.MaxOutput)
	stderr := sandbox.NewCappedWriter(req.Stderr, req.MaxOutput)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if req.Stdin != nil {
		cmd.Stdin = req.Stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that keeps the output pipe open must not hang Wait forever.
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("local exec %q: %w", req.Cmd[0], err)
	}
	pgid := cmd.Process.Pid
	p.track(h.ID, pgid)
	// Background processes the command started (a runtime server, say) stay in its group and are
	// killed by Stop or Destroy; the group is forgotten only once it is empty.
	defer func() {
		if syscall.Kill(-pgid, 0) == syscall.ESRCH {
			p.untrack(h.ID, pgid)
		}
	}()

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timeout, stopTimeout := sandbox.ExecTimeout(req.Timeout)
	defer stopTimeout()
	res := sandbox.ExecResult{}
	select {
	case err = <-done:
	case <-timeout:
		killTree(pgid, marker)
		<-done
		res.TimedOut, res.ExitCode = true, sandbox.ExitTimeout
		err = nil
	case <-ctx.Done():
		killTree(pgid, marker)
		<-done
		return sandbox.ExecResult{}, fmt.Errorf("local exec: %w", ctx.Err())
	}
	res.Duration = time.Since(start)
	res.Truncated = stdout.Truncated() || stderr.Truncated()
	if !res.TimedOut {
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			res.ExitCode = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				res.ExitCode = 128 + int(ws.Signal())
			}
		case errors.Is(err, exec.ErrWaitDelay):
			// The command exited; only its output pipe lingered.
		default:
			return res, fmt.Errorf("local exec %q: %w", req.Cmd[0], err)
		}
	}
	return res, nil
}

// Dial implements sandbox.Dialer over loopback: local sandboxes share the host's network.
func (p *Provider) Dial(ctx context.Context, h sandbox.Handle, port int) (net.Conn, error) {
	m, err := p.readMeta(h.ID)
	if err != nil {
		return nil, err
	}
	if m.State != sandbox.StateRunning {
		return nil, fmt.Errorf("local dial in %s: %w", h.ID, sandbox.ErrNotRunning)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("local dial port %d: %w", port, err)
	}
	return c, nil
}

var _ io.Writer = (*sandbox.CappedWriter)(nil)

// execMarker names the environment variable that marks an exec's processes.
const execMarker = "THREADBOX_EXEC"

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// killTree kills the command's process group, then, in a few rounds, every process whose environment
// carries the exec's marker (children that left the group). Processes of other users cannot be read
// and are not ours.
func killTree(pgid int, marker string) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	needle := []byte(marker + "\x00")
	for range 5 {
		found := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !bytes.Contains(env, needle) {
				continue
			}
			found++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if found == 0 {
			return
		}
	}
}
