package claudecode

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// TestSessionKeptUnlessTranscriptMissing: only the look-up's own "not found" (exit 1) drops the
// session. A look-up that failed to run (killed, out of memory, a shell that cannot start) says
// nothing about the transcript: taking it for a missing one would start a new session and lose the
// agent's own memory of the thread for good.
func TestSessionKeptUnlessTranscriptMissing(t *testing.T) {
	const prev = "123e4567-e89b-42d3-a456-426614174000"
	tests := []struct {
		name         string
		exit         int
		wantReplaced bool
		wantErr      bool
	}{
		{"found", 0, false, false},
		{"missing", 1, true, false},
		{"killed", 137, false, true},
		{"shell not runnable", 126, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, replaced, err := New(Config{}).Session(t.Context(), printingSandbox{exit: tt.exit}, prev, "t")
			if tt.wantErr {
				require.Error(t, err)
				require.Equal(t, runtime.ClassSandboxDown, runtime.Classify(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantReplaced, replaced)
			if !tt.wantReplaced {
				require.Equal(t, prev, id)
			}
		})
	}
}
