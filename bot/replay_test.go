package bot

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
)

// TestReplayNoteSaysWhyTheSandboxIsNew: a recreate tells the user why their sandbox was replaced.
func TestReplayNoteSaysWhyTheSandboxIsNew(t *testing.T) {
	tests := []struct {
		name   string
		reason agentpool.RecreateReason
		want   string
	}{
		{"new session only", "", "(This thread's sandbox or agent session was new, generation 3: I replayed the conversation so far to it.)"},
		{"failed resumes", agentpool.RecreateResumeFailed, "(The previous sandbox failed to start several times, so this thread got a new one; files from before are gone. I replayed the conversation so far to it, generation 3.)"},
		{"moved", agentpool.RecreateMoved, "(This thread moved to another sandbox provider, so it got a new sandbox there; files from before are gone. I replayed the conversation so far to it, generation 3.)"},
		{"destroy unfinished", agentpool.RecreateDestroying, "(The previous sandbox was being removed (a move or a reset), so this thread got a new one; files from before are gone. I replayed the conversation so far to it, generation 3.)"},
		{"gone", agentpool.RecreateGone, "(The previous sandbox was removed, so this thread got a new one; files from before are gone. I replayed the conversation so far to it, generation 3.)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, replayNote(agentpool.Outcome{Generation: 3, Replayed: true, Recreate: tc.reason}))
		})
	}
}

func TestUserErrorProviderOutage(t *testing.T) {
	err := fmt.Errorf("inspect sandbox: the sandbox service did not come back within 2m0s: docker inspect x: %w: Cannot connect to the Docker daemon", agentpool.ErrProviderUnavailable)
	p := Explain(nil, "turn failed", err)
	require.Equal(t, agentpool.EUNAVAILABLE, p.Code)
	require.NotContains(t, p.String(), "Docker daemon", "the daemon's own words stay in the log")
}
