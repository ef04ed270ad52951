package bot

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// TestRecoverCommandsRetriesALiveReplicasFailedPost: recovery passes run on the leader only (and once
// at each start), so a follower's command reply whose post failed was never tried again while the
// follower lived, and came out, stale, only when it died. A failed post is done with by its owner:
// the pass takes it over and tries again, as it does its own; a live owner's record without a failed
// post is still left to it (it may be answering now).
func TestRecoverCommandsRetriesALiveReplicasFailedPost(t *testing.T) {
	ctx := t.Context()
	st := dbtest.OpenSQLite(t)
	dl, err := encodeDelivery(cmdMsg("", ""))
	require.NoError(t, err)
	answer := "Stopping the running turn."
	record := func(event string, failed bool) {
		c, err := st.CommandInsert(ctx, db.NewCommand{PlatformEventID: event, ThreadKey: "test:t1", UserID: "U1",
			Command: "stop", Delivery: dl, Owner: "follower"})
		require.NoError(t, err)
		require.NoError(t, st.CommandAnswer(ctx, c.ID, answer))
		if failed {
			_, err = st.CommandPostFailed(ctx, c.ID)
			require.NoError(t, err)
		}
	}
	record("e1", true)
	record("e2", false)

	r := &privatePosts{}
	h := NewHandler(HandlerConfig{}, &instanceTurns{id: "leader"}, st, nil, nil)
	h.RegisterPlatform(replyPlatform{r: r})
	alive := func(string) (bool, error) { return true, nil }
	n, err := h.RecoverCommands(ctx, alive)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{answer}, r.all())
	open := openCommands(t, st)
	require.Len(t, open, 1)
	require.Equal(t, "e2", open[0].PlatformEventID, "a live owner's command still being answered is left to it")
}
