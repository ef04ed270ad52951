package claudecode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/sandbox"
)

// failingSandbox fails every exec with err, after reading the exec's stdin when readStdin is set
// (and printing claude's first line, as a started claude does).
type failingSandbox struct {
	sandbox.Sandbox
	readStdin bool
	err       error
}

func (s failingSandbox) Handle() sandbox.Handle { return sandbox.Handle{Provider: "test", ID: "sb1"} }

func (s failingSandbox) Exec(_ context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if s.readStdin && req.Stdin != nil {
		_, _ = io.ReadAll(req.Stdin)
		_, _ = req.Stdout.Write([]byte(`{"type":"system","subtype":"init","session_id":"x"}` + "\n"))
	}
	return sandbox.ExecResult{}, s.err
}

// TestExecFailureAfterThePromptIsCut: an exec that failed before claude got the prompt (the container
// stopped, the daemon unreachable) may be sent again: sandbox-down. One that failed after (its output
// stream cut by a daemon restart, the container removed under it) is runtime.ErrPromptCut: claude
// may have done part of the work, and may still be running; the pool must not send it again.
func TestExecFailureAfterThePromptIsCut(t *testing.T) {
	tests := []struct {
		name      string
		readStdin bool
		err       error
		want      runtime.Class
	}{
		{"not started: the container stopped", false, fmt.Errorf("docker exec in c1: %w", sandbox.ErrNotRunning), runtime.ClassSandboxDown},
		{"not started: the daemon unreachable", false, fmt.Errorf("docker exec in c1: %w: %w", sandbox.ErrUnavailable, sandbox.ErrNoEffect), runtime.ClassSandboxDown},
		{"cut mid-turn: the output stream ended", true, fmt.Errorf("exec in c1: reading output: %w", io.ErrUnexpectedEOF), runtime.ClassInterrupted},
		{"cut mid-turn: the daemon went away", true, fmt.Errorf("docker exec inspect: %w", sandbox.ErrUnavailable), runtime.ClassInterrupted},
		{"cut mid-turn: the container removed", true, fmt.Errorf("docker exec inspect: %w", sandbox.ErrNotFound), runtime.ClassInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{}).Prompt(t.Context(), failingSandbox{readStdin: tt.readStdin, err: tt.err},
				"123e4567-e89b-42d3-a456-426614174000", runtime.Prompt{Text: "push the release"}, nil)
			require.Error(t, err)
			require.Equal(t, tt.want, runtime.Classify(err), "%v", err)
		})
	}
}

// TestExecCutMidTurnIsNotRetried runs the real claude CLI against the fake model and cuts its exec's
// stream while a tool of the turn runs: claude is still running the prompt, so the turn is
// ErrPromptCut (the pool tells the user it was interrupted and aborts), not sandbox-down (which made
// the pool run claude a second time with the same prompt, beside the first). Abort then stops it.
func TestExecCutMidTurnIsNotRetried(t *testing.T) {
	const gate = "/tmp/tb-gate"
	sb, fake := gatedClaude(t, gate, "TB-CUT")
	rt := New(Config{BaseURL: fake.URL, APIKey: "sk-tb-cut-test", Model: "claude-sonnet-4-5"})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sid, cs, err := cutAtTool(t, ctx, rt, sb, "Wait for the gate. TB-CUT", 2*time.Minute)
	require.ErrorIs(t, err, runtime.ErrPromptCut)
	require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)

	// claude is still running the first prompt, at the gate: running it again would run it twice.
	runtimetest.Sh(t, sb, `pgrep -f -- "--(resume|session-id) $1" >/dev/null`, sid)
	waitForTool(t, ctx, sb, gate) // its tool, at the gate
	require.NoError(t, rt.Abort(ctx, sb, sid), "what the pool does with a cut turn")
	<-cs.Done                                                           // the real exec ended with its process
	runtimetest.Sh(t, sb, `! pgrep -f "$1" >/dev/null`, gateLoop(gate)) // and claude's tool with it
	reqs, err := fake.Requests(ctx)
	require.NoError(t, err)
	prompts := 0
	for _, r := range reqs {
		if strings.Contains(r.Prompt, "TB-CUT") && !r.AfterTool {
			prompts++
		}
	}
	require.Equal(t, 1, prompts, "the model got the prompt once")
}

// killedSandbox runs claude's exec to its end with exit 137 (it read the prompt, printed its first
// line, and was killed), and then answers every later exec (the probe) with probeErr.
type killedSandbox struct {
	sandbox.Sandbox
	probeErr error
	probes   int
}

func (s *killedSandbox) Handle() sandbox.Handle { return sandbox.Handle{Provider: "test", ID: "sb1"} }

func (s *killedSandbox) Exec(_ context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if req.Stdin != nil {
		_, _ = io.ReadAll(req.Stdin)
		_, _ = req.Stdout.Write([]byte(`{"type":"system","subtype":"init","session_id":"x"}` + "\n"))
		return sandbox.ExecResult{ExitCode: 137}, nil
	}
	s.probes++
	return sandbox.ExecResult{}, s.probeErr
}

// TestKilledWithItsSandboxIsCut: claude killed because its container was stopped or removed under it
// (Docker reports the exec as exited 137, not failed) had the prompt and may have done part of the
// work: the turn is ErrPromptCut, which the user is told as interrupted and can retry, not a runtime
// failure ("claude exited 137 without a result"), which retry cannot find. Killed inside a sandbox
// that still runs (the OOM killer), it stays that failure.
func TestKilledWithItsSandboxIsCut(t *testing.T) {
	tests := []struct {
		name     string
		probeErr error
		want     runtime.Class
	}{
		{"the container stopped under it", fmt.Errorf("docker exec in c1: %w", sandbox.ErrNotRunning), runtime.ClassInterrupted},
		{"the container removed under it", fmt.Errorf("docker exec in c1: %w", sandbox.ErrNotFound), runtime.ClassInterrupted},
		{"killed in a live sandbox", nil, runtime.ClassFatal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := &killedSandbox{probeErr: tt.probeErr}
			_, err := New(Config{}).Prompt(t.Context(), sb, "123e4567-e89b-42d3-a456-426614174000", runtime.Prompt{Text: "push the release"}, nil)
			require.Error(t, err)
			require.Equal(t, tt.want, runtime.Classify(err), "%v", err)
			require.Equal(t, 1, sb.probes)
		})
	}
}

// TestClaudeLeftRunningByACrashIsStoppedFirst: claude's exec was cut as the bot crashed, and claude
// runs on at the gate; the bot that comes back (a new runtime, which never aborted it) runs the
// session's next prompt, often the user's "retry": the old claude is killed before the new one
// starts, not left to run beside it on the same transcript.
func TestClaudeLeftRunningByACrashIsStoppedFirst(t *testing.T) {
	const gate = "/tmp/tb-gate-crash"
	sb, fake := gatedClaude(t, gate, "TB-CRASH")
	cfg := Config{BaseURL: fake.URL, APIKey: "sk-tb-crash-test", Model: "claude-sonnet-4-5"}
	before := New(cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute) // only so that a regression fails rather than hangs
	defer cancel()
	sid, cs, err := cutAtTool(t, ctx, before, sb, "Wait for the gate. TB-CRASH", 30*time.Minute)
	require.ErrorIs(t, err, runtime.ErrPromptCut)
	runtimetest.Sh(t, sb, `pgrep -f -- "--(resume|session-id) $1" >/dev/null`, sid) // at the gate
	waitForTool(t, ctx, sb, gate)                                                   // its tool too

	after := New(cfg) // the bot after its restart: no Abort
	require.NoError(t, after.Ensure(ctx, sb))
	res, err := after.Prompt(ctx, sb, sid, runtime.Prompt{Text: "hello again", Timeout: 2 * time.Minute}, nil)
	require.NoError(t, err)
	require.Equal(t, "ok", res.Answer)
	// The new claude has exited: a claude on the session now is the old one, still at the gate.
	runtimetest.Sh(t, sb, `! pgrep -f -- "--(resume|session-id) $1" >/dev/null`, sid)
	runtimetest.Sh(t, sb, `! pgrep -f "$1" >/dev/null`, gateLoop(gate)) // nor the tool it started
	<-cs.Done                                                           // the old claude's exec ended with it
}

// gatedClaude starts a sandbox for the claude CLI and the fake model, whose script answers a prompt
// holding mark with a Bash tool call that waits until the file gate exists, then with "through";
// any other prompt gets "ok".
func gatedClaude(t *testing.T, gate, mark string) (sandbox.Sandbox, *runtimetest.Fake) {
	t.Helper()
	sb, _ := runtimetest.NewSandbox(t, runtimetest.Provider(t), t.Name())
	fake := runtimetest.StartFake(t, sb, runtimetest.BuildFake(t), llmfake.Script{Rules: []llmfake.Rule{
		{PromptContains: mark, AfterTool: llmfake.Bool(false), Reply: llmfake.Reply{Tool: &llmfake.ToolCall{Name: "Bash",
			Args: json.RawMessage(`{"command":"while [ ! -e ` + gate + ` ]; do sleep 0.05; done; echo open","description":"Wait for the gate"}`)}}},
		{PromptContains: mark, AfterTool: llmfake.Bool(true), Reply: llmfake.Reply{Text: "through"}},
	}, Default: &llmfake.Reply{Text: "ok"}})
	return sb, fake
}

// cutAtTool starts a session of rt in sb and prompts it with text through a CutExec, whose stream it
// cuts once claude reports its tool call (claude runs the tool); it returns the session, the
// CutExec and Prompt's error.
func cutAtTool(t *testing.T, ctx context.Context, rt *Runtime, sb sandbox.Sandbox, text string, timeout time.Duration) (string, *runtimetest.CutExec, error) {
	t.Helper()
	require.NoError(t, rt.Ensure(ctx, sb))
	sid, _, err := rt.Session(ctx, sb, "", "test")
	require.NoError(t, err)
	cs := runtimetest.NewCutExec(sb)
	_, err = rt.Prompt(ctx, cs, sid, runtime.Prompt{Text: text, Timeout: timeout}, func(e runtime.Event) {
		if e.Kind == runtime.EventTool {
			cs.Cut()
		}
	})
	return sid, cs, err
}

// waitForTool waits until the tool command waiting at gate runs: claude reports the tool call (and
// the test cuts the stream) a moment before its Bash tool has started the process.
func waitForTool(t *testing.T, ctx context.Context, sb sandbox.Sandbox, gate string) {
	t.Helper()
	require.NoError(t, runtimetest.Eventually(ctx, time.Minute, func() (bool, error) {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"pgrep", "-f", gateLoop(gate)}, Timeout: 30 * time.Second})
		return err == nil && res.ExitCode == 0, err
	}), "the tool waiting at the gate runs")
}

// gateLoop is a pgrep pattern for the tool command that waits at gate, which matches neither itself
// nor the sh that runs it.
func gateLoop(gate string) string { return "while \\[ ! -e " + gate + " \\]" }
