package bot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/threadbox/threadbox/agentpool"
)

// CmdRuntime picks the thread's agent runtime: "runtime <name>" alone in a message.
const CmdRuntime = "runtime"

// RuntimeChooser is an optional capability of the handler's Turns (*agentpool.Pool has it): the
// deployment's agent runtimes (runtime.enabled) and a thread's choice among them.
type RuntimeChooser interface {
	Runtimes() []string
	DefaultRuntime() string
	UseRuntime(ctx context.Context, t agentpool.WorkspaceThread, name string) (agentpool.RuntimeChange, error)
}

// KnownRuntimes are the agent runtimes Threadbox has (config's list, less "auto"): "runtime <one of
// them>" is the command even where the deployment does not enable it, so the user is told so.
var KnownRuntimes = []string{"shell", "claude-code", "opencode", "sandbox-agent"}

// isRuntime reports whether word (lower-cased) is the runtime command: "runtime" alone, or with the
// name of a runtime known or enabled. Any other ("runtime error") is a request for the agent.
func isRuntime(word string, enabled []string) bool {
	return isChoice(word, CmdRuntime, KnownRuntimes, enabled)
}

// runtimeNames is the deployment's enabled runtimes (none when it has no choice).
func (h *Handler) runtimeNames() []string {
	if rc, ok := h.turns.(RuntimeChooser); ok {
		return rc.Runtimes()
	}
	return nil
}

// runtime runs "runtime <name>" as use runs "use <provider>".
func (h *Handler) runtime(ctx context.Context, msg Message, text string) func(ctx context.Context) string {
	rc, ok := h.turns.(RuntimeChooser)
	if !ok {
		return func(context.Context) string { return "This bot runs one agent runtime; there is nothing to choose." }
	}
	return h.choose(msg, text, threadChoice{
		cmd: CmdRuntime, verb: "change the runtime of", enabled: rc.Runtimes, def: rc.DefaultRuntime, choose: rc.UseRuntime,
		usage: "Write \"runtime <name>\" to pick the agent that works in this thread. ",
		list:  enabledRuntimesText,
		unknown: func(err error) ([]string, bool) {
			var u *agentpool.UnknownRuntimeError
			if errors.As(err, &u) {
				return u.Enabled, true
			}
			return nil, false
		},
		unknownText: "There is no agent runtime %q here. ",
		destroyFailed: func(ch agentpool.RuntimeChange, why string) string {
			return fmt.Sprintf("This thread now uses the %s runtime, but its sandbox (where %s ran) could not be destroyed yet: %s. It is retried; the next message starts a new sandbox for %s with the conversation so far replayed.",
				ch.To, ch.From, why, ch.To)
		},
		failed: "Switching runtimes failed: ",
		done:   RuntimeChangeText,
	})
}

// RuntimeChangeText says what a runtime choice did.
func RuntimeChangeText(ch agentpool.RuntimeChange) string {
	switch {
	case ch.Unchanged:
		return fmt.Sprintf("This thread already uses the %s runtime.", ch.To)
	case ch.Moved:
		return fmt.Sprintf("Switched this thread from the %s runtime to %s: its sandbox was destroyed (with any files in it), and the next message starts a new one for %s with the conversation so far replayed.",
			ch.From, ch.To, ch.To)
	case ch.Replay:
		return fmt.Sprintf("This thread now uses the %s runtime: the next message starts a sandbox for it with the conversation so far replayed.", ch.To)
	}
	return fmt.Sprintf("This thread will use the %s runtime.", ch.To)
}

// enabledRuntimesText lists the runtimes a thread may pick.
func enabledRuntimesText(enabled []string, def string) string {
	return "Enabled runtimes: " + strings.Join(markDefault(enabled, def), ", ") + "."
}

// withRuntime adds status's line about the thread's runtime, when the deployment has a choice.
func (h *Handler) withRuntime(ctx context.Context, msg Message, status string) string {
	rc, ok := h.turns.(RuntimeChooser)
	if !ok || len(rc.Runtimes()) < 2 {
		return status
	}
	name := rc.DefaultRuntime()
	if s, err := h.store.SessionGet(ctx, msg.Thread.String()); err == nil && s.Runtime != "" && slices.Contains(rc.Runtimes(), s.Runtime) {
		name = s.Runtime
	}
	return fmt.Sprintf("%s\nThis thread uses the %s runtime. %s Switch with \"runtime <name>\".", status, name,
		enabledRuntimesText(rc.Runtimes(), rc.DefaultRuntime()))
}
