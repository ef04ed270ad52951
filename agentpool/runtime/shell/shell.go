// Package shell is the simplest runtime: each message is run as a shell command in the sandbox's work
// directory, and its output is the answer. It is the default when no model key is configured, and the
// mode operators use for ops work inside a thread's sandbox.
package shell

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/proctree"
	"github.com/threadbox/threadbox/sandbox"
)

// HistoryPath is where a replayed history is left for the user to read: a shell has no memory, but
// the person driving it may want to know what happened before the sandbox was replaced.
const HistoryPath = ".threadbox/history.md"

// Runtime implements runtime.Runtime with plain exec.
type Runtime struct {
	// mu protects shells and runs.
	mu sync.Mutex
	// shells caches which shell each sandbox has (bash, or busybox sh in minimal images).
	shells map[string]string
	// runs holds the tags (runEnv) of each session's commands that may still run, for Abort: added
	// as the command is handed over, dropped once it surely ended (it exited, or never started) or
	// Abort found none of its processes left.
	runs map[runKey][]string
}

// runKey names a session in a sandbox: a thread keeps its shell session id across sandboxes.
type runKey struct{ sandbox, session string }

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a shell runtime.
func New() *Runtime { return &Runtime{shells: map[string]string{}, runs: map[runKey][]string{}} }

var _ runtime.ProcessBound = (*Runtime)(nil)

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "shell" }

// PromptIsProcess implements runtime.ProcessBound: Prompt is one Exec, which returns when the
// command exits, so a silent command is still running, not stuck.
func (r *Runtime) PromptIsProcess() bool { return true }

// Ensure prepares the directories the bot relies on, once per sandbox: a shell has no server process
// that could be down, and a sandbox that stopped answering fails the prompt's own exec as sandbox-down,
// which makes the pool re-resolve. Skipping the exec keeps a warm turn to one exec.
func (r *Runtime) Ensure(ctx context.Context, sb sandbox.Sandbox) error {
	r.mu.Lock()
	_, done := r.shells[sb.Handle().ID]
	r.mu.Unlock()
	if done {
		return nil
	}
	var out strings.Builder
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Cmd:     []string{"/bin/sh", "-c", "mkdir -p input output/display && if command -v bash >/dev/null 2>&1; then echo bash; else echo sh; fi"},
		Stdout:  &out,
		Timeout: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("shell runtime: %w: %w", runtime.ErrSandboxDown, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("shell runtime: preparing the workdir exited %d", res.ExitCode)
	}
	sh := strings.TrimSpace(out.String())
	r.mu.Lock()
	r.shells[sb.Handle().ID] = sh
	r.mu.Unlock()
	return nil
}

// Session implements runtime.Runtime. A shell keeps no conversation, so an existing id is kept and a
// missing one minted; it is never "replaced".
func (r *Runtime) Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (string, bool, error) {
	if prevID != "" {
		return prevID, false, nil
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "shell-" + hex.EncodeToString(b[:]), false, nil
}

// Prompt runs p.Text as a command. stdout and stderr stream as progress and make up the answer; a
// non-zero exit is reported in the answer and marks the result as an error. An exec that fails before
// the command was handed its start signal (startScript) is sandbox-down when the sandbox is gone or
// stopped, and the pool may run it again; one that fails after is runtime.ErrPromptCut, never run
// again on the bot's own.
func (r *Runtime) Prompt(ctx context.Context, sb sandbox.Sandbox, sessionID string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	if p.History != "" {
		if err := sb.WriteFile(ctx, HistoryPath, []byte(p.History), 0o644); err != nil {
			return runtime.Result{}, fmt.Errorf("shell runtime: writing history: %w", classify(err))
		}
	}
	r.mu.Lock()
	sh := r.shells[sb.Handle().ID]
	r.mu.Unlock()
	if sh == "" {
		sh = "sh"
	}
	// Every process of this run carries its own tag, which Abort kills by: a command whose exec was
	// cut may run on, and the thread's next command (a retry) must not find it still running.
	key, tag := runKey{sb.Handle().ID, sessionID}, rand.Text()
	env := maps.Clone(p.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[runEnv] = tag
	r.abortLeftovers(ctx, sb, key)
	r.started(key, tag)
	var stdout, stderr strings.Builder
	start := &startSignal{r: strings.NewReader(startLine)}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		// The command is the last argument, after the shell name startScript runs it with and the
		// kill round it stops the session's previous command with, if that one still runs.
		Cmd:     []string{sh, "-c", startScript, sh, proctree.Round, p.Text},
		Env:     env,
		Timeout: p.Timeout,
		Stdin:   start,
		Stdout:  tee{&stdout, emit, "stdout"},
		Stderr:  tee{&stderr, emit, "stderr"},
	})
	if err != nil {
		if !start.withheld() && ctx.Err() == nil {
			// The command may have started (the container removed or stopped under it, the exec's
			// stream cut by a daemon restart or a lost connection to a cloud provider): it may have
			// done part of its work, or all of it, and may still run (the pool then aborts it). Running
			// it again could do the work twice (echo >> log; git push).
			return runtime.Result{}, fmt.Errorf("shell runtime: the command's exec failed after it was handed the command: %w",
				runtime.PromptCut(classify(err)))
		}
		if start.withheld() {
			r.ended(key, tag) // nothing ran that Abort could find
		}
		// The start signal never left, or the caller gave up (the provider killed the command, and
		// the pool aborts): the command is not reported as cut.
		return runtime.Result{}, fmt.Errorf("shell runtime: %w", classify(err))
	}
	if derr := runtime.WentDownUnder(ctx, sb, res); derr != nil {
		// The command ran and went down with its sandbox: the user is told it was interrupted, not
		// its exit code.
		return runtime.Result{}, fmt.Errorf("shell runtime: the command %w", runtime.PromptCut(classify(derr)))
	}
	// The command exited: what it left running in the background (a server it started) is the
	// user's, not Abort's to kill.
	r.ended(key, tag)
	return runtime.Result{
		Answer:   FormatAnswer(stdout.String(), stderr.String(), res),
		IsError:  res.ExitCode != 0,
		ExitCode: res.ExitCode,
		Duration: res.Duration,
	}, nil
}

// FormatAnswer renders a command's outcome for the chat.
func FormatAnswer(stdout, stderr string, res sandbox.ExecResult) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(stdout, "\n"))
	if s := strings.TrimRight(stderr, "\n"); s != "" {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString("stderr:\n")
		b.WriteString(s)
	}
	if res.Truncated {
		b.WriteString("\n[output truncated]")
	}
	switch {
	case res.TimedOut:
		fmt.Fprintf(&b, "\n[timed out: exit %d]", res.ExitCode)
	case res.ExitCode != 0:
		fmt.Fprintf(&b, "\n[exit %d]", res.ExitCode)
	}
	if b.Len() == 0 {
		return "(no output)"
	}
	return strings.TrimLeft(b.String(), "\n")
}

// classify marks a sandbox that went away under the command as down, so the pool re-resolves.
func classify(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
		return fmt.Errorf("%w: %w", runtime.ErrSandboxDown, err)
	}
	return err
}

// startScript wraps the command: it runs the command ($2, in a new shell named $0, with "--" ending
// the shell's options so that a message starting with '-' is still the command) only once it has read
// the line startLine on stdin, and exits 125 without running it otherwise. The runtime writes that
// line (startSignal) only to an exec that has started, so whether it was read tells "the command may
// have run" from "it surely did not", the same way on every provider: the providers read Stdin only
// for a process they started (Docker, Deno, local) or just before starting it (Daytona). A start line
// cut short does not match, so a command never runs on a partial signal; and the command itself is
// in argv, so it is never cut short. Its stdin is /dev/null, as an exec without Stdin has.
//
// Before it runs the command it stops the session's previous one if that still runs: a command
// whose exec was cut while the bot crashed (or whose Abort failed) runs on, and the bot that comes
// back has lost its tag, so the user's "retry" would run beside it. runFile keeps the running
// command's tag, main pid (the wrapper's, which exec hands on) and that process's start time: the
// kill round ($1, with need-run) takes a previous command whose main process still runs (the pid has
// the same start time: not a pid reused since; it may have cleared its environment, as "exec env -i
// cmd" does), its descendants and the processes carrying its tag; one that exited is left alone
// with what it left in the background on purpose. The file is the sandbox's to write: a tag that is
// not letters and digits (rand.Text) is ignored, the round checks the rest, and a runFile that is not a regular file (a fifo, whose open waits; a link, to /dev/zero, which
// has no end of line, or to a file it would overwrite; a repository can carry one) is neither read
// nor written through, but replaced.
const startScript = `IFS= read -r go && [ "$go" = start ] || { echo "threadbox: the command was not started: its start signal did not arrive" >&2; exit 125; }
k=$1 c=$2 f=` + runFile + `
if [ -f "$f" ] && [ ! -h "$f" ] && { read -r t _ <"$f"; } 2>/dev/null && case $t in ''|*[!A-Z0-9]*) false ;; esac; then
  for _ in 1 2 3; do [ -n "$("$0" -c "$k" sh need-run "run:$f" "` + runEnv + `=$t")" ] || break; done
fi
{ { [ -d "${f%/*}" ] || mkdir -p "${f%/*}"; } && { [ -f "$f" ] && [ ! -h "$f" ] || rm -f "$f"; } &&
  read -r l </proc/$$/stat && set -- ${l##*) } && echo "$` + runEnv + ` $$ ${20}" >"$f"; } 2>/dev/null
exec "$0" -c -- "$c" </dev/null`

// runFile is where startScript keeps the running command's tag, main pid and its start time (field
// 22 of /proc/PID/stat), in the working directory, beside the history.
const runFile = ".threadbox/shell-run"

// startLine is the start signal startScript waits for.
const startLine = "start\n"

// startSignal is startLine on its way to the exec's stdin. The first Read marks it sent; withheld
// marks it never to be sent, so that a provider that reads stdin after its Exec returned (Docker
// copies it in a goroutine it does not wait for) cannot start a command the runtime has reported as
// never started.
type startSignal struct {
	r io.Reader
	// state is signalPending, then signalSent (a Read began) or signalWithheld, never changing again.
	state atomic.Int32
}

const (
	signalPending = iota
	signalSent
	signalWithheld
)

var errWithheld = errors.New("shell runtime: the command was reported as never started")

func (s *startSignal) Read(p []byte) (int, error) {
	if !s.state.CompareAndSwap(signalPending, signalSent) && s.state.Load() == signalWithheld {
		return 0, errWithheld
	}
	return s.r.Read(p)
}

// withheld reports whether the signal was never read, and if so makes sure it never will be.
func (s *startSignal) withheld() bool {
	return s.state.CompareAndSwap(signalPending, signalWithheld) || s.state.Load() == signalWithheld
}

// tee collects output and reports each chunk as a progress event.
type tee struct {
	b    *strings.Builder
	emit func(runtime.Event)
	tool string
}

func (t tee) Write(p []byte) (int, error) {
	t.b.Write(p)
	if t.emit != nil {
		t.emit(runtime.Event{Kind: runtime.EventText, Text: string(p), Tool: t.tool, At: time.Now()})
	}
	return len(p), nil
}
