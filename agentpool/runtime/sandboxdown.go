package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// WentDownUnder tells whether a command that ended as res went down with its sandbox: a sandbox that
// is stopped or removed under a running command kills it, and Docker reports such an exec as exited
// 137 rather than failed. A command that died of a signal (exit 128+n, not its timeout) is told apart
// from one killed inside a live sandbox (kill -9, the OOM killer) by asking the sandbox to run a
// trivial command: the error of that probe is returned when it fails, nil otherwise (also when the
// command was not killed). The process-bound runtimes (shell, claude-code) report a command that went
// down with its sandbox after it had its input as ErrPromptCut, never as its exit code.
func WentDownUnder(ctx context.Context, sb sandbox.Sandbox, res sandbox.ExecResult) error {
	if res.TimedOut || res.ExitCode <= 128 || res.ExitCode > 128+64 || ctx.Err() != nil {
		return nil
	}
	probe, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"true"}, Timeout: 30 * time.Second})
	switch {
	case ctx.Err() != nil:
		return nil // the caller's own end, not the sandbox's
	case err != nil:
		return fmt.Errorf("killed (exit %d), and the sandbox no longer runs commands: %w", res.ExitCode, err)
	case probe.ExitCode != 0:
		return fmt.Errorf("killed (exit %d), and the sandbox no longer runs commands: true exited %d", res.ExitCode, probe.ExitCode)
	}
	return nil
}
