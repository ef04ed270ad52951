package bot

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db/dbtest"
)

// dropTurns is instanceTurns whose Do keeps each job's drop, for the test to drop it as a reset or a
// shutdown would.
type dropTurns struct {
	instanceTurns
	drops []func(error)
}

func (f *dropTurns) Do(_ string, _ func(context.Context), drop func(error)) error {
	f.drops = append(f.drops, drop)
	return nil
}

// TestDroppedAdminCommandAnswered: an admin command whose queued job a reset of the thread drops is
// answered at once, privately, that it did not run, not a loop interval later with "I restarted
// before I could answer" (no restart happened). One dropped by shutdown is left to the next process,
// as a queued turn is.
func TestDroppedAdminCommandAnswered(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reason   error
		answered bool
	}{
		{"reset", agentpool.ErrReset, true},
		{"shutdown", agentpool.ErrClosed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := dbtest.OpenSQLite(t)
			turns := &dropTurns{instanceTurns: instanceTurns{id: "p1"}}
			h := NewHandler(HandlerConfig{}, turns, st, NewAdmin(st, &recordingOps{store: st}, []string{"test:U1"}, nil), nil)
			r := &privatePosts{}
			h.RegisterPlatform(replyPlatform{r: r})
			require.NoError(t, h.Handle(t.Context(), cmdMsg("admin stats", "e1"), r))
			require.Len(t, turns.drops, 1)
			turns.drops[0](tc.reason)
			require.NoError(t, h.Wait(t.Context()))
			if !tc.answered {
				require.Empty(t, r.privateTo("U1"))
				require.Len(t, openCommands(t, st), 1, "left for the next process")
				return
			}
			got := r.privateTo("U1")
			require.Len(t, got, 1)
			require.Contains(t, got[0], "did not run")
			require.NotContains(t, got[0], "restarted")
			require.Empty(t, r.all(), "an admin reply never goes to the thread")
			require.Empty(t, openCommands(t, st))
			n, err := h.RecoverCommands(t.Context(), func(string) (bool, error) { return true, nil })
			require.NoError(t, err)
			require.Zero(t, n, "answered once")
			require.False(t, strings.Contains(strings.Join(r.all(), "\n"), "restarted"))
		})
	}
}
