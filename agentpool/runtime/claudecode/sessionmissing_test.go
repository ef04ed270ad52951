package claudecode

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// TestSessionMissingOnlyWithoutAnAnswer: "No conversation found" is what claude prints when
// --resume names a transcript that is gone, and then it gives no result. Any other process of the
// turn (a hook, a tool the agent left behind) may print the same words; a turn that did give a
// successful result is that result, not a lost session (which makes the pool run the turn again).
func TestSessionMissingOnlyWithoutAnAnswer(t *testing.T) {
	const result = `{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"x"}` + "\n"
	tests := []struct {
		name           string
		stdout, stderr string
		exit           int
		wantMissing    bool
		wantAnswer     string
	}{
		{"gone: no result", "", "No conversation found with session ID: 123e4567-e89b-42d3-a456-426614174000\n", 1, true, ""},
		{"a result, and the words on stderr", result, "hook: No conversation found\n", 0, false, "done"},
		{"a result, and the words on stdout", "No conversation found\n" + result, "", 0, false, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Config{})
			res, err := r.Prompt(t.Context(), printingSandbox{stdout: tt.stdout, stderr: tt.stderr, exit: tt.exit},
				"123e4567-e89b-42d3-a456-426614174000", runtime.Prompt{Text: "hi"}, nil)
			if tt.wantMissing {
				require.True(t, errors.Is(err, runtime.ErrSessionMissing), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantAnswer, res.Answer)
		})
	}
}
