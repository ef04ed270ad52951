// Package echo is a runtime that answers every prompt with its own text at once, with no agent and
// no sandbox work: benchmarks of the bot and its adapters use it to measure the bot, not an agent.
package echo

import (
	"context"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
)

// Runtime echoes prompts.
type Runtime struct{}

var _ runtime.Runtime = Runtime{}

// Name implements runtime.Runtime.
func (Runtime) Name() string { return "echo" }

// Ensure implements runtime.Runtime; there is nothing to install.
func (Runtime) Ensure(context.Context, sandbox.Sandbox) error { return nil }

// Session implements runtime.Runtime with one fixed session.
func (Runtime) Session(context.Context, sandbox.Sandbox, string, string) (string, bool, error) {
	return "s", false, nil
}

// Prompt implements runtime.Runtime: one text event, and the prompt as the answer.
func (Runtime) Prompt(_ context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	emit(runtime.Event{Kind: runtime.EventText, Text: p.Text})
	return runtime.Result{Answer: p.Text}, nil
}

// Abort implements runtime.Runtime; nothing runs.
func (Runtime) Abort(context.Context, sandbox.Sandbox, string) error { return nil }
