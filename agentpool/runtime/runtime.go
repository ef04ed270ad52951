// Package runtime defines how the pool drives an agent inside a sandbox. Each runtime (shell,
// claude-code, opencode, sandbox-agent) keeps its protocol in its own package; the pool sees only this
// interface and the error classes below.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// Runtime is one kind of agent.
//
// The pool calls Ensure on every turn (cheap when healthy), then Session, then Prompt. Implementations
// must be safe for concurrent use across different sandboxes; the pool never drives one sandbox from
// two goroutines at once.
type Runtime interface {
	// Name is the config name ("shell", "claude-code", …).
	Name() string
	// Ensure installs or launches the runtime if needed and waits until it is healthy, backing off from
	// tens of milliseconds (never fixed multi-second polls). An error wrapping ErrSandboxDown means the
	// sandbox itself is unreachable.
	Ensure(ctx context.Context, sb sandbox.Sandbox) error
	// Session returns the agent session to use: prevID when it still exists, else a new one with
	// replaced=true (the caller then replays the thread's history into the next prompt). title names
	// the session (the thread key) so it can be found again.
	Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (id string, replaced bool, err error)
	// Prompt runs one turn and reports progress to emit as it happens. emit must not block.
	Prompt(ctx context.Context, sb sandbox.Sandbox, sessionID string, p Prompt, emit func(Event)) (Result, error)
	// Abort stops a running turn in the session, best effort.
	Abort(ctx context.Context, sb sandbox.Sandbox, sessionID string) error
}

// ProcessBound is an optional capability of a runtime whose Prompt runs the turn as one process in
// the sandbox (an Exec) and returns as soon as that process exits. While such a Prompt is in flight,
// the work is alive even when it prints nothing (a quiet build or test run), so the pool's watchdog
// does not count its silence as stuck; the turn timeout still bounds it. A runtime that talks to a
// server (whose Prompt could wait for ever on a hung agent) must not claim it.
type ProcessBound interface {
	PromptIsProcess() bool
}

// LogFile is an optional capability of a runtime that launches a server in the sandbox: where that
// server's own output goes (relative to the working directory, or absolute). The admin `logs` command
// tails it. A runtime without it (shell, claude-code: one process per prompt, whose output is the
// answer) keeps no log of its own.
type LogFile interface {
	LogPath() string
}

// Prompt is one turn's input.
type Prompt struct {
	// Text is the user's message.
	Text string
	// System is the system prompt (prompts/), sent when the runtime supports one.
	System string
	// History is the replayed transcript, set only when the sandbox or agent session was replaced.
	History string
	// Env reaches only the runtime's own process for this turn (model keys), never the sandbox env.
	Env map[string]string
	// Timeout bounds the turn (0: ctx only).
	Timeout time.Duration
}

// EventKind says what a progress event carries.
type EventKind string

const (
	// EventText is a piece of the agent's answer or thinking, or command output.
	EventText EventKind = "text"
	// EventTool is a tool use, with a short summary ("bash: ls -la").
	EventTool EventKind = "tool"
	// EventStatus is a lifecycle note: a runtime's own words in Text ("model API busy, retrying"),
	// or, from the pool, a fact in Note (with its numbers) that the bot words for the user.
	EventStatus EventKind = "status"
)

// Event is one progress update.
type Event struct {
	Kind EventKind
	Text string
	Tool string
	// Note names a status event's fact when the pool reports one (agentpool's Note constants): the
	// bot, which alone speaks to users, words it, so Text is empty. Place and Max go with a turn
	// waiting in line for a sandbox slot: its place (from 1), and the deployment's live sandbox cap.
	Note       string
	Place, Max int
	At         time.Time
}

// MaxAnswerBytes bounds an answer a runtime assembles from many pieces (streamed text chunks). A
// runtime whose answer outgrows it fails the turn with an error wrapping sandbox.ErrTooLarge rather
// than keep growing; 10 MB answers fit.
const MaxAnswerBytes = 32 << 20

// Usage is what a turn cost, where the runtime reports it.
type Usage struct {
	InputTokens  int64   `json:"input_tokens,omitempty"`
	OutputTokens int64   `json:"output_tokens,omitempty"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
}

// Result is how a turn ended.
type Result struct {
	Answer string
	// IsError means the agent itself reported failure (a non-zero exit for shell); the answer still
	// goes to the user.
	IsError  bool
	ExitCode int
	Usage    Usage
	Duration time.Duration
	// Refusal is set when the turn was refused rather than run to its end (a *BudgetError from the
	// model gateway); IsError is then true, and Answer is the refusal's message for the record, while
	// the bot words the refusal itself for the user.
	Refusal error
}

// Error classes for prompt failures (seed 003's send-failure classification). The pool re-resolves
// at most once and retries the prompt at most once for the first two; anything else is reported.
//
// Prompt returns those two only while the prompt surely has not reached the agent (the connection was
// refused, the server was not started, the session was missing before the prompt was taken): agents
// have side effects, so a prompt the agent got is never sent again on our own. Once it may have got
// it, a failure to follow the run to its end is ErrPromptCut.
var (
	// ErrSessionMissing: the agent session is gone; create a new one and replay history.
	ErrSessionMissing = errors.New("agent session missing")
	// ErrSandboxDown: connection refused, 5xx, sandbox not started; re-resolve the sandbox.
	ErrSandboxDown = errors.New("sandbox down")
	// ErrPromptCut: the agent got the prompt (or may have), and then the runtime lost the run before
	// it ended and could not find it again (its event stream dropped for good, the server or the
	// sandbox died): the agent may have done part of the work, or all of it. The pool does not retry;
	// it ends the turn as interrupted, and the user may run it again on purpose. It wins over the
	// other classes when an error wraps several.
	ErrPromptCut = errors.New("the agent's run was cut off after it got the prompt")
)

// SandboxDown marks a failure to reach the sandbox at all (an exec or a connection that failed) as
// ErrSandboxDown, so the pool re-resolves the sandbox; unless the caller gave up (a context error),
// or it is marked already.
func SandboxDown(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrSandboxDown) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrSandboxDown, err)
}

// PromptCut marks err, a failure after the prompt may have reached the agent, as ErrPromptCut (unless
// it is marked already), so the pool does not send the prompt again.
func PromptCut(err error) error {
	if errors.Is(err, ErrPromptCut) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPromptCut, err)
}

// Class is a prompt failure's recovery class.
type Class int

const (
	ClassNone Class = iota
	ClassSessionMissing
	ClassSandboxDown
	ClassFatal
	// ClassInterrupted: the prompt reached the agent and its outcome is unknown (ErrPromptCut); never
	// retried.
	ClassInterrupted
)

// Classify maps an error to its recovery class. Provider errors count as sandbox-down when the
// sandbox is gone or stopped. ErrPromptCut is looked at first: a cut run whose cause was the sandbox
// going down must not be retried as a plain sandbox-down.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrPromptCut):
		return ClassInterrupted
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassFatal
	case errors.Is(err, ErrSessionMissing):
		return ClassSessionMissing
	case errors.Is(err, ErrSandboxDown), errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrNotRunning):
		return ClassSandboxDown
	}
	return ClassFatal
}
