package agentpool

import (
	"context"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// silentRuntime wraps the shell runtime but is not runtime.ProcessBound: it stands for a server
// runtime, whose Prompt in flight says nothing about the agent being alive.
type silentRuntime struct{ runtime.Runtime }

// TestWatchdogSilentCommand: a command that prints nothing for longer than StuckAfter but is still
// running is not stuck when the runtime's prompt is its process (the shell runtime); the same silence
// from a runtime that cannot vouch for its process is. Fake time (synctest): 15 minutes of silence
// against StuckAfter = 10m.
func TestWatchdogSilentCommand(t *testing.T) {
	tests := []struct {
		name      string
		rt        func() runtime.Runtime
		wantStuck bool
	}{
		{"shell: a running process is alive", func() runtime.Runtime { return shellrt.New() }, false},
		{"runtime without process liveness: stuck", func() runtime.Runtime { return silentRuntime{shellrt.New()} }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				prov := sandboxfake.New()
				prov.Exec_ = func(ctx context.Context, b *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
					script := req.Cmd[len(req.Cmd)-1]
					if strings.Contains(script, "mkdir -p input") { // the shell runtime's Ensure
						_, _ = io.WriteString(req.Stdout, "sh\n")
						return sandbox.ExecResult{}, nil
					}
					// make test: silent for 15 minutes, then one line.
					select {
					case <-time.After(15 * time.Minute):
					case <-ctx.Done():
						return sandbox.ExecResult{}, ctx.Err()
					}
					_, _ = io.WriteString(req.Stdout, "ok\n")
					return sandbox.ExecResult{Duration: 15 * time.Minute}, nil
				}
				f := newFixture(t, newSQLiteStore(t), prov, tc.rt(), func(c *Config) { c.StuckAfter = 10 * time.Minute })
				sink := newCollector()
				tk := submit(t, f.pool, "web:w", "e1", "make test", sink)
				out := sink.wait(t, 1)[0]
				turn, err := f.store.TurnGet(context.Background(), tk.TurnID)
				require.NoError(t, err)
				if tc.wantStuck {
					require.ErrorIs(t, out.Err, ErrStuck)
					require.Equal(t, db.TurnFailed, turn.Status)
					return
				}
				require.NoError(t, out.Err)
				require.Contains(t, out.Answer, "ok")
				require.Equal(t, db.TurnDone, turn.Status)
				// The leader's watchdog reads LastEventAt: it was kept fresh while the process ran.
				require.WithinDuration(t, turn.FinishedAt, turn.LastEventAt, 10*time.Minute/4+time.Second)
			})
		})
	}
}
