package runtime

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestWentDownUnder: only a command killed by a signal is looked into, and only a sandbox that no
// longer runs a command says it went down with it.
func TestWentDownUnder(t *testing.T) {
	tests := []struct {
		name      string
		res       sandbox.ExecResult
		stop      bool
		wantProbe bool
		wantDown  bool
	}{
		{"exited 0", sandbox.ExecResult{}, true, false, false},
		{"exited 1", sandbox.ExecResult{ExitCode: 1}, true, false, false},
		{"its timeout", sandbox.ExecResult{ExitCode: 137, TimedOut: true}, true, false, false},
		{"killed, the sandbox runs", sandbox.ExecResult{ExitCode: 137}, false, true, false},
		{"killed, the sandbox stopped", sandbox.ExecResult{ExitCode: 137}, true, true, true},
		{"terminated, the sandbox stopped", sandbox.ExecResult{ExitCode: 143}, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sandboxfake.New()
			h, err := p.Create(t.Context(), sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
			require.NoError(t, err)
			if tt.stop {
				p.StopOutOfBand(h.ID)
			}
			err = WentDownUnder(t.Context(), sandbox.Bind(p, h), tt.res)
			require.Equal(t, tt.wantDown, err != nil, "%v", err)
			require.Equal(t, tt.wantProbe, p.Calls("Exec") == 1)
			if tt.wantDown {
				require.ErrorIs(t, err, sandbox.ErrNotRunning)
			}
		})
	}
	t.Run("the caller gave up", func(t *testing.T) {
		p := sandboxfake.New()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.NoError(t, WentDownUnder(ctx, sandbox.Bind(p, sandbox.Handle{Provider: "fake", ID: "gone"}), sandbox.ExecResult{ExitCode: 137}))
		require.Zero(t, p.Calls("Exec"))
	})
}
