package shell

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/proctree"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestStartScript runs the wrapper under the shells it meets (bash, and the host's sh, dash or
// busybox): the command runs only on a whole start line, with its stdin at EOF, $0 the shell's name,
// and a message starting with '-' still the command; anything short of the line (nothing, a cut
// line, another line) runs nothing and exits 125.
func TestStartScript(t *testing.T) {
	tests := []struct {
		name, stdin, cmd string
		wantOut          string
		wantExit         int
	}{
		{"started", "start\n", `echo ran; exit 3`, "ran\n", 3},
		{"its stdin is at EOF", "start\n", `wc -c`, "0\n", 0},
		{"its $0 is the shell", "start\n", `echo "$0"`, "SHELL\n", 0},
		{"an option-looking message is the command", "start\n", `--version`, "", 127},
		{"no start line: not run", "", `echo ran`, "", 125},
		{"a cut start line: not run", "sta", `echo ran`, "", 125},
		{"no newline: not run", "start", `echo ran`, "", 125},
		{"another line: not run", "go\n", `echo ran`, "", 125},
	}
	for _, sh := range []string{"bash", "sh"} {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("%s is needed to test the wrapper: %v", sh, err)
		}
		for _, tt := range tests {
			t.Run(sh+"/"+tt.name, func(t *testing.T) {
				var stdout, stderr strings.Builder
				cmd := exec.CommandContext(t.Context(), sh, "-c", startScript, sh, proctree.Round, tt.cmd)
				cmd.Dir = t.TempDir() // it keeps runFile there
				cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(tt.stdin), &stdout, &stderr
				err := cmd.Run()
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else {
					require.NoError(t, err)
				}
				require.Equal(t, tt.wantExit, code, "stderr: %s", stderr.String())
				require.Equal(t, strings.ReplaceAll(tt.wantOut, "SHELL", sh), stdout.String())
				if tt.wantExit == 125 {
					require.Contains(t, stderr.String(), "the command was not started")
				}
			})
		}
	}
}

// wrapperFake is a fake provider whose exec of a prompt does what startScript does with its start
// line: it reads stdin, and runs the command (counted) only on "start". before is returned before
// stdin is read (the exec never started); after, once the command ran (the exec failed under it).
type wrapperFake struct {
	*sandboxfake.Provider
	runs          atomic.Int32
	before, after error
}

func newWrapperFake() *wrapperFake {
	f := &wrapperFake{Provider: sandboxfake.New()}
	f.Exec_ = func(ctx context.Context, b *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		if req.Stdin == nil { // Ensure, or a probe
			if req.Stdout != nil {
				_, _ = io.WriteString(req.Stdout, "sh\n")
			}
			return sandbox.ExecResult{}, nil
		}
		if f.before != nil {
			return sandbox.ExecResult{}, f.before
		}
		if f.started(req.Stdin) {
			_, _ = io.WriteString(req.Stdout, "partial output\n")
		}
		return sandbox.ExecResult{}, f.after
	}
	return f
}

// started reads the start line as startScript does, and counts a run when it came whole.
func (f *wrapperFake) started(stdin io.Reader) bool {
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil || line != startLine {
		return false
	}
	f.runs.Add(1)
	return true
}

func (f *wrapperFake) sandbox(t *testing.T) (sandbox.Sandbox, sandbox.Handle) {
	h, err := f.Create(t.Context(), sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
	require.NoError(t, err)
	return sandbox.Bind(f, h), h
}

// TestExecFailureAfterTheCommandStartedIsCut: an exec that failed before the command got its start
// signal (the container stopped or removed before the exec, the provider unreachable) ran nothing,
// and keeps its class: the pool may run it again. One that failed after it (the container stopped or
// removed mid-command, the output stream cut) is runtime.ErrPromptCut: the command ran, and the pool
// must not run it again.
func TestExecFailureAfterTheCommandStartedIsCut(t *testing.T) {
	tests := []struct {
		name          string
		before, after error
		stop, remove  bool
		want          runtime.Class
		wantRuns      int32
	}{
		{name: "not started: the container stopped", stop: true, want: runtime.ClassSandboxDown},
		{name: "not started: the container removed", remove: true, want: runtime.ClassSandboxDown},
		{name: "not started: the exec refused", before: fmt.Errorf("docker exec in c1: %w", sandbox.ErrNotRunning), want: runtime.ClassSandboxDown},
		{name: "not started: the provider unreachable", before: fmt.Errorf("docker exec in c1: %w", sandbox.ErrUnavailable), want: runtime.ClassFatal},
		{name: "cut: the container stopped mid-command", after: fmt.Errorf("docker exec inspect: %w", sandbox.ErrNotRunning), want: runtime.ClassInterrupted, wantRuns: 1},
		{name: "cut: the container removed mid-command", after: fmt.Errorf("docker exec inspect: %w", sandbox.ErrNotFound), want: runtime.ClassInterrupted, wantRuns: 1},
		{name: "cut: the output stream ended", after: fmt.Errorf("exec in c1: reading output: %w", io.ErrUnexpectedEOF), want: runtime.ClassInterrupted, wantRuns: 1},
		{name: "cut: the daemon went away", after: fmt.Errorf("docker exec inspect: %w", sandbox.ErrUnavailable), want: runtime.ClassInterrupted, wantRuns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newWrapperFake()
			f.before, f.after = tt.before, tt.after
			sb, h := f.sandbox(t)
			r := New()
			require.NoError(t, r.Ensure(t.Context(), sb))
			switch {
			case tt.stop:
				f.StopOutOfBand(h.ID)
			case tt.remove:
				f.RemoveOutOfBand(h.ID)
			}
			_, err := r.Prompt(t.Context(), sb, "shell-1", runtime.Prompt{Text: "echo x >> log; git push"}, nil)
			require.Error(t, err)
			require.Equal(t, tt.want, runtime.Classify(err), "%v", err)
			require.Equal(t, tt.wantRuns, f.runs.Load())
			if tt.want == runtime.ClassInterrupted {
				require.ErrorIs(t, err, runtime.ErrPromptCut)
			} else {
				require.NotErrorIs(t, err, runtime.ErrPromptCut)
			}
		})
	}
}

// TestStdinReadAfterExecReturnedStartsNothing: a provider may read Stdin after its Exec returned
// (Docker copies it in a goroutine it does not wait for). Once the runtime has reported the command
// as never started (sandbox-down, so the pool runs it again), such a late read must not hand the
// first exec its start signal: the command would run twice.
func TestStdinReadAfterExecReturnedStartsNothing(t *testing.T) {
	f := newWrapperFake()
	late := make(chan io.Reader, 1)
	f.Exec_ = func(ctx context.Context, b *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		if req.Stdin == nil {
			_, _ = io.WriteString(req.Stdout, "sh\n")
			return sandbox.ExecResult{}, nil
		}
		late <- req.Stdin // the copy that had not begun when the exec failed
		return sandbox.ExecResult{}, fmt.Errorf("exec in c1: reading output: %w", sandbox.ErrNotRunning)
	}
	sb, _ := f.sandbox(t)
	r := New()
	require.NoError(t, r.Ensure(t.Context(), sb))
	_, err := r.Prompt(t.Context(), sb, "shell-1", runtime.Prompt{Text: "git push"}, nil)
	require.Equal(t, runtime.ClassSandboxDown, runtime.Classify(err), "%v", err)

	require.False(t, f.started(<-late), "the late copy starts nothing")
	require.Zero(t, f.runs.Load())
}

// TestKilledCommandIsCutOnlyWhenTheSandboxWentDown: a sandbox stopped or removed under a command kills
// it, and Docker reports that as an exit of 137, not an error; the command ran, and the turn is cut
// (interrupted), not answered with the exit code nor run again. A command killed inside a sandbox
// that still runs (kill -9, the OOM killer) is an answer.
func TestKilledCommandIsCutOnlyWhenTheSandboxWentDown(t *testing.T) {
	tests := []struct {
		name      string
		exit      int
		stop, rm  bool
		wantClass runtime.Class
	}{
		{name: "killed, the sandbox stopped", exit: 137, stop: true, wantClass: runtime.ClassInterrupted},
		{name: "killed, the sandbox removed", exit: 137, rm: true, wantClass: runtime.ClassInterrupted},
		{name: "terminated, the sandbox stopped", exit: 143, stop: true, wantClass: runtime.ClassInterrupted},
		{name: "killed, the sandbox runs on", exit: 137, wantClass: runtime.ClassNone},
		{name: "failed, the sandbox stopped later", exit: 1, stop: true, wantClass: runtime.ClassNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newWrapperFake()
			sb, h := f.sandbox(t)
			inner := f.Exec_
			f.Exec_ = func(ctx context.Context, b *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
				if req.Stdin == nil || !f.started(req.Stdin) {
					return inner(ctx, b, req)
				}
				switch {
				case tt.stop:
					f.StopOutOfBand(h.ID)
				case tt.rm:
					f.RemoveOutOfBand(h.ID)
				}
				return sandbox.ExecResult{ExitCode: tt.exit}, nil
			}
			r := New()
			require.NoError(t, r.Ensure(t.Context(), sb))
			res, err := r.Prompt(t.Context(), sb, "shell-1", runtime.Prompt{Text: "git push"}, nil)
			require.Equal(t, tt.wantClass, runtime.Classify(err), "%v", err)
			require.Equal(t, int32(1), f.runs.Load())
			if tt.wantClass == runtime.ClassNone {
				require.Equal(t, tt.exit, res.ExitCode)
				require.Contains(t, res.Answer, fmt.Sprintf("[exit %d]", tt.exit))
			}
		})
	}
}

// TestStartScriptTakesRunFileAsData: runFile is the sandbox's to write, so whatever it holds (a glob,
// a path, a command, a pid that is not ours, nothing) is only ever looked up, never run: the command
// runs as always, and the file then holds the new command's tag and pid.
func TestStartScriptTakesRunFileAsData(t *testing.T) {
	for _, content := range []string{"", "*\n", "* 1\n", "../../x 1\n", "ABC 1; touch pwned\n", "$(touch pwned) 1\n", "ABC self\n", "ABC 1\n"} {
		t.Run(fmt.Sprintf("%q", content), func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".threadbox"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, runFile), []byte(content), 0o644))
			var stdout, stderr strings.Builder
			cmd := exec.CommandContext(t.Context(), "sh", "-c", startScript, "sh", proctree.Round, "echo ran")
			cmd.Dir, cmd.Env = dir, []string{runEnv + "=NEWTAG234", "PATH=" + os.Getenv("PATH")}
			cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(startLine), &stdout, &stderr
			require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
			require.Equal(t, "ran\n", stdout.String())
			require.NoFileExists(t, filepath.Join(dir, "pwned"))
			kept, err := os.ReadFile(filepath.Join(dir, runFile))
			require.NoError(t, err)
			requireRunFile(t, string(kept), cmd.Process.Pid)
		})
	}
}

// TestStartScriptTakesOnlyARegularRunFile: runFile is the sandbox's to make (a repository checked
// out into the workdir can carry it as a symlink), and what is not a regular file is neither read
// nor written through: a fifo (whose open waits for a writer, or a reader), a link to /dev/zero
// (which has no end of line) or to a file elsewhere (which the tag would overwrite). The command
// runs as always, and runFile is then a regular file again, with the new tag and pid.
func TestStartScriptTakesOnlyARegularRunFile(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path, elsewhere string)
	}{
		{"a fifo", func(t *testing.T, path, _ string) { require.NoError(t, syscall.Mkfifo(path, 0o644)) }},
		{"a link to /dev/zero", func(t *testing.T, path, _ string) { require.NoError(t, os.Symlink("/dev/zero", path)) }},
		{"a link to a file elsewhere", func(t *testing.T, path, elsewhere string) { require.NoError(t, os.Symlink(elsewhere, path)) }},
		{"a link to nothing", func(t *testing.T, path, elsewhere string) {
			require.NoError(t, os.Symlink(elsewhere+".new", path))
		}},
	}
	for _, sh := range []string{"bash", "sh"} {
		for _, tt := range tests {
			t.Run(sh+"/"+tt.name, func(t *testing.T) {
				dir := t.TempDir()
				elsewhere := filepath.Join(t.TempDir(), "notes")
				require.NoError(t, os.WriteFile(elsewhere, []byte("mine\n"), 0o644))
				require.NoError(t, os.MkdirAll(filepath.Join(dir, ".threadbox"), 0o755))
				tt.make(t, filepath.Join(dir, runFile), elsewhere)
				// Without the rule the script never gets to the command: the bound ends the test's wait.
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				var stdout, stderr strings.Builder
				cmd := exec.CommandContext(ctx, sh, "-c", startScript, sh, proctree.Round, "echo ran")
				cmd.Dir, cmd.Env = dir, []string{runEnv + "=NEWTAG234", "PATH=" + os.Getenv("PATH")}
				cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(startLine), &stdout, &stderr
				require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
				require.Equal(t, "ran\n", stdout.String())
				fi, err := os.Lstat(filepath.Join(dir, runFile))
				require.NoError(t, err)
				require.True(t, fi.Mode().IsRegular(), "runFile is %s", fi.Mode())
				kept, err := os.ReadFile(filepath.Join(dir, runFile))
				require.NoError(t, err)
				requireRunFile(t, string(kept), cmd.Process.Pid)
				mine, err := os.ReadFile(elsewhere)
				require.NoError(t, err)
				require.Equal(t, "mine\n", string(mine))
				require.NoFileExists(t, elsewhere+".new")
			})
		}
	}
}

// requireRunFile checks runFile as the start script of process pid wrote it: its tag (NEWTAG234),
// pid and start time.
func requireRunFile(t *testing.T, kept string, pid int) {
	t.Helper()
	f := strings.Fields(kept)
	require.Len(t, f, 3, "tag, pid, start time: %q", kept)
	require.Equal(t, []string{"NEWTAG234", strconv.Itoa(pid)}, f[:2])
	_, err := strconv.ParseUint(f[2], 10, 64)
	require.NoError(t, err, "the start time: %q", kept)
	require.True(t, strings.HasSuffix(kept, "\n"))
}
