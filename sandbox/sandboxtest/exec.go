package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// testExec covers the exec options on one shared sandbox; the cases are independent of each other.
func (s *suite) testExec(t *testing.T) {
	h := s.create(t, s.spec(t))

	t.Run("ExitCodes", func(t *testing.T) {
		for _, tc := range []struct {
			script string
			want   int
		}{
			{"true", 0}, {"false", 1}, {"exit 3", 3}, {"exit 125", 125}, {"kill -9 $$", 137},
		} {
			_, _, res := s.sh(t, h, tc.script)
			require.Equal(t, tc.want, res.ExitCode, "exit code of %q", tc.script)
			require.False(t, res.TimedOut)
		}
	})
	t.Run("StdoutStderrApart", func(t *testing.T) {
		out, errOut, res := s.sh(t, h, "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 7")
		require.Equal(t, "out1\nout2\n", out)
		require.Equal(t, "err1\nerr2\n", errOut)
		require.Equal(t, 7, res.ExitCode)
	})
	t.Run("MissingCommand", func(t *testing.T) {
		res, err := s.p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"/no/such/binary"}})
		require.True(t, err != nil || res.ExitCode != 0, "a missing binary is an error or a non-zero exit")
	})
	t.Run("Stdin", func(t *testing.T) {
		in := "line one\nline two\n" + strings.Repeat("x", 200_000)
		out := s.ok(t, h, "cat", func(r *sandbox.ExecRequest) { r.Stdin = strings.NewReader(in) })
		require.Equal(t, strings.TrimSpace(in), out)
	})
	t.Run("NoStdinIsEOF", func(t *testing.T) {
		require.Equal(t, "0", s.ok(t, h, "wc -c"), "without Stdin the command reads EOF at once")
	})
	t.Run("Dir", func(t *testing.T) {
		if !s.caps.Isolated {
			t.Skip("provider runs on the host: paths inside are host paths")
		}
		s.ok(t, h, "mkdir -p sub/deeper")
		for _, tc := range []struct{ dir, want string }{
			{"", sandbox.DefaultWorkDir},
			{"/tmp", "/tmp"},
			{"sub/deeper", sandbox.DefaultWorkDir + "/sub/deeper"},
		} {
			require.Equal(t, tc.want, s.ok(t, h, "pwd", func(r *sandbox.ExecRequest) { r.Dir = tc.dir }), "Dir %q", tc.dir)
		}
	})
	t.Run("Env", func(t *testing.T) {
		got := s.ok(t, h, `printf '%s|%s' "$TB_ONE" "$TB_TWO"`, func(r *sandbox.ExecRequest) {
			r.Env = map[string]string{"TB_ONE": "a b c", "TB_TWO": "x=y;'\"$HOME"}
		})
		require.Equal(t, `a b c|x=y;'"$HOME`, got)
		require.Empty(t, s.ok(t, h, `printf '%s' "$TB_ONE"`), "exec env does not stick to the sandbox")
	})
	t.Run("User", func(t *testing.T) {
		if !s.caps.Users {
			t.Skip("provider declares no user control")
		}
		require.Equal(t, "1000:1000", s.ok(t, h, `echo "$(id -u):$(id -g)"`), "default user")
		require.Equal(t, "4242:4343", s.ok(t, h, `echo "$(id -u):$(id -g)"`, func(r *sandbox.ExecRequest) { r.User = "4242:4343" }))
	})
	t.Run("OutputBound", func(t *testing.T) {
		var out, errOut strings.Builder
		res, err := s.p.Exec(t.Context(), h, sandbox.ExecRequest{
			Cmd:       []string{"sh", "-c", "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2; echo done >&2"},
			Stdout:    &out,
			Stderr:    &errOut,
			MaxOutput: 1000,
		})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "the command keeps running past the bound")
		require.True(t, res.Truncated)
		require.Equal(t, 1000, out.Len())
		require.Equal(t, strings.Repeat("\x00", 10)+"done\n", errOut.String(), "each stream has its own bound")

		_, _, res = s.sh(t, h, "echo small")
		require.False(t, res.Truncated)
	})
}

// testExecTimeout: a command that outlives its timeout reports 124, and it and every process it
// started (a background child, and a grandchild in a session of its own) are gone.
func (s *suite) testExecTimeout(t *testing.T) {
	h := s.create(t, s.spec(t))
	started := make(chan struct{})
	res, err := s.p.Exec(t.Context(), h, sandbox.ExecRequest{
		Cmd: []string{"sh", "-c", `echo $$ > parent.pid
sleep 1001 & echo $! > child.pid
setsid sleep 1002 & echo $! > grandchild.pid
echo ready
exec sleep 1003`},
		Stdout:  signalWriter(started),
		Timeout: 2 * time.Second,
	})
	require.NoError(t, err)
	requireClosed(t, started, "the script ran before the timeout")
	require.Equal(t, sandbox.ExitTimeout, res.ExitCode)
	require.True(t, res.TimedOut)
	require.Less(t, res.Duration, 30*time.Second)
	s.requireGone(t, h, "parent.pid", "child.pid", "grandchild.pid")

	// Closing stdout and stderr ends the stream, not the command: it still gets its exit code, or
	// its timeout.
	_, _, res = s.sh(t, h, "exec >/dev/null 2>&1; sleep 1; exit 5")
	require.Equal(t, 5, res.ExitCode)
	_, _, res = s.sh(t, h, "exec >/dev/null 2>&1; echo $$ > closed.pid; exec sleep 1009", func(r *sandbox.ExecRequest) {
		r.Timeout = time.Second
	})
	require.Equal(t, sandbox.ExitTimeout, res.ExitCode)
	require.True(t, res.TimedOut)
	s.requireGone(t, h, "closed.pid")

	// A quick command under a timeout is not affected by it.
	_, _, res = s.sh(t, h, "exit 4", func(r *sandbox.ExecRequest) { r.Timeout = 30 * time.Second })
	require.Equal(t, 4, res.ExitCode)
	require.False(t, res.TimedOut)
}

// testExecTimeoutForkBomb: the timeout still kills everything when a fork bomb has used up the
// pids limit (which is when it matters most), and the sandbox is usable afterwards.
func (s *suite) testExecTimeoutForkBomb(t *testing.T) {
	if !s.caps.Limits {
		t.Skip("provider declares no resource limits")
	}
	spec := s.spec(t)
	spec.Resources = sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 48, ExecTimeout: time.Minute}
	h := s.create(t, spec)
	res, err := s.p.Exec(t.Context(), h, sandbox.ExecRequest{
		Cmd:     []string{"sh", "-c", "while :; do sleep 1008 & done 2>/dev/null"},
		Timeout: time.Second,
	})
	require.NoError(t, err)
	require.Equal(t, sandbox.ExitTimeout, res.ExitCode)
	eventually(t, 10*time.Second, "fork bomb gone", func() (bool, string) {
		out, _, res := s.sh(t, h, "ps -o args | grep -c '^sleep 1008' || true")
		return res.ExitCode == 0 && out == "0\n", fmt.Sprintf("exit %d, %q sleeps left", res.ExitCode, out)
	})
}

// testExecCancel: cancelling ctx ends Exec with the ctx error and kills the command.
func (s *suite) testExecCancel(t *testing.T) {
	h := s.create(t, s.spec(t))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	go func() {
		<-started
		cancel()
	}()
	_, err := s.p.Exec(ctx, h, sandbox.ExecRequest{
		Cmd:    []string{"sh", "-c", "echo $$ > cancel.pid; sleep 1004 & echo $! > cancelchild.pid; echo ready; exec sleep 1005"},
		Stdout: signalWriter(started),
	})
	require.True(t, errors.Is(err, context.Canceled), "want context.Canceled, got %v", err)
	s.requireGone(t, h, "cancel.pid", "cancelchild.pid")
}

// requireGone waits (bounded) until none of the pids in the given files is alive. A killed process
// may linger for a moment as a zombie until init reaps it; that counts as gone.
func (s *suite) requireGone(t *testing.T, h sandbox.Handle, pidFiles ...string) {
	t.Helper()
	script := `for f in "$@"; do p=$(cat "$f") || exit 2; [ -n "$p" ] || exit 2
  if [ -e /proc/$p ] && ! grep -q '^State:[[:space:]]*Z' /proc/$p/status 2>/dev/null; then echo "$f=$p alive: $(cat /proc/$p/cmdline | tr '\0' ' ')"; fi
done`
	eventually(t, 10*time.Second, "killed processes gone", func() (bool, string) {
		out, errOut, res := s.sh(t, h, script, func(r *sandbox.ExecRequest) {
			r.Cmd = append([]string{"sh", "-c", script, "sh"}, pidFiles...)
		})
		require.NotEqual(t, 2, res.ExitCode, "pid files missing: %s", errOut)
		return out == "", out
	})
}

// signalWriter closes ch on the first write: the command has started and said so.
func signalWriter(ch chan struct{}) *onceWriter { return &onceWriter{ch: ch} }

type onceWriter struct {
	once sync.Once
	ch   chan struct{}
}

func (w *onceWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

func requireClosed(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatalf("%s: never happened", what)
	}
}
