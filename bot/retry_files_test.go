package bot

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestRetrySaysFilesWereNotResent: retry submits the interrupted prompt again, but not the files
// that came with it; the reply says so, rather than let the user think the agent had them.
func TestRetrySaysFilesWereNotResent(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	pool, err := agentpool.New(agentpool.Config{Deployment: "retryfiles", Image: "img"},
		agentpool.Deps{Store: st, Provider: sandboxfake.New(), Runtime: minimalRuntime{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	h := NewHandler(HandlerConfig{}, pool, st, nil, nil)
	thread := SlackThread("T", "C", "1.1")
	tr, err := st.TurnInsert(t.Context(), db.NewTurn{ThreadKey: thread.String(), PlatformEventID: "ev0", UserID: "U", Prompt: "load it",
		Delivery: json.RawMessage(`{"v":1,"platform":"slack","files":[{"name":"data.csv","size":10,"ref":"r1"},{"name":"b.txt","size":3,"ref":"r2"}]}`)})
	require.NoError(t, err)
	_, err = st.TurnStart(t.Context(), tr.ID, "")
	require.NoError(t, err)
	_, err = st.TurnFinish(t.Context(), tr.ID, db.TurnResult{Status: db.TurnFailed, Error: agentpool.InterruptedText})
	require.NoError(t, err)

	r := newChatReplier()
	require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, ChannelID: "C", User: User{ID: "U"}, Text: "retry", EventID: "ev1"}, r))
	r.waitPost(t, "echo: load it")
	require.Contains(t, r.waitPost(t, "not re-sent"), "data.csv, b.txt")
	require.NoError(t, h.Wait(t.Context()))
}
