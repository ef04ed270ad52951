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
	"strings"
	"sync"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
)

// HistoryPath is where a replayed history is left for the user to read: a shell has no memory, but
// the person driving it may want to know what happened before the sandbox was replaced.
const HistoryPath = ".threadbox/history.md"

// Runtime implements runtime.Runtime with plain exec.
type Runtime struct {
	// mu protects shells.
	mu sync.Mutex
	// shells caches which shell each sandbox has (bash, or busybox sh in minimal images).
	shells map[string]string
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a shell runtime.
func New() *Runtime { return &Runtime{shells: map[string]string{}} }

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
// non-zero exit is reported in the answer and marks the result as an error.
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
	var stdout, stderr strings.Builder
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		// "--" ends the shell's options: a message starting with '-' is still the command.
		Cmd:     []string{sh, "-c", "--", p.Text},
		Env:     p.Env,
		Timeout: p.Timeout,
		Stdout:  tee{&stdout, emit, "stdout"},
		Stderr:  tee{&stderr, emit, "stderr"},
	})
	if err != nil {
		return runtime.Result{}, fmt.Errorf("shell runtime: %w", classify(err))
	}
	return runtime.Result{
		Answer:   FormatAnswer(stdout.String(), stderr.String(), res),
		IsError:  res.ExitCode != 0,
		ExitCode: res.ExitCode,
		Duration: res.Duration,
	}, nil
}

// Abort implements runtime.Runtime: the pool cancels the Exec's context, which kills the command.
func (r *Runtime) Abort(ctx context.Context, sb sandbox.Sandbox, sessionID string) error { return nil }

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
