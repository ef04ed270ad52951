package bot

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// passOnInsert is a store that runs a recovery pass of the handler right after a command's record is
// written, before CommandInsert returns: the moment the maintenance loop may look while Handle is
// still recording.
type passOnInsert struct {
	db.Store
	pass func()
}

func (s *passOnInsert) CommandInsert(ctx context.Context, c db.NewCommand) (db.Command, error) {
	rec, err := s.Store.CommandInsert(ctx, c)
	if err == nil && s.pass != nil {
		s.pass()
	}
	return rec, err
}

// TestRecoverCommandsLeavesACommandBeingRecorded: a recovery pass that finds this process's command
// between its record's insert and Handle's taking it in hand must leave it alone: the command is
// live and answers itself, so its sender gets its reply, not also "I restarted before I could
// answer".
func TestRecoverCommandsLeavesACommandBeingRecorded(t *testing.T) {
	st := &passOnInsert{Store: dbtest.OpenSQLite(t)}
	r := &privatePosts{}
	h := NewHandler(HandlerConfig{}, &instanceTurns{id: "p1"}, st, nil, nil)
	h.RegisterPlatform(replyPlatform{r: r})
	var recovered int
	st.pass = func() {
		n, err := h.RecoverCommands(t.Context(), func(string) (bool, error) { return true, nil })
		require.NoError(t, err)
		recovered += n
	}
	require.NoError(t, h.Handle(t.Context(), cmdMsg("help", "e1"), r))
	require.NoError(t, h.Wait(t.Context()))
	require.Zero(t, recovered, "the pass answered a live command")
	require.Equal(t, []string{HelpText}, r.all())
	require.Empty(t, openCommands(t, st))
}
