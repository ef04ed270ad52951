package dbtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// testCommands: a command is recorded once per event, answered once, claimed by one owner at a time,
// listed in id order while open, and forgotten once posted, the same on both engines.
func testCommands(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	dl := json.RawMessage(`{"v":1,"platform":"slack","reply":{"c":"C1"}}`)
	nc := func(ev string) db.NewCommand {
		return db.NewCommand{PlatformEventID: ev, ThreadKey: "slack:T:C:1", UserID: "U1", Command: "reset",
			Delivery: dl, Owner: "a"}
	}

	for _, bad := range []db.NewCommand{
		{ThreadKey: "slack:T:C:1", Command: "reset", Delivery: dl, Owner: "a"},                           // no event
		{PlatformEventID: "e", ThreadKey: "slack:T:C:1", Delivery: dl, Owner: "a"},                       // no name
		{PlatformEventID: "e", ThreadKey: "slack:T:C:1", Command: strings.Repeat("x", 65), Delivery: dl}, // name too long
		{PlatformEventID: "e", ThreadKey: "slack:T:C:1", Command: "reset", Delivery: json.RawMessage(`{`)},
		{PlatformEventID: "e", Command: "reset", Delivery: dl}, // no thread
	} {
		_, err := s.CommandInsert(ctx, bad)
		require.ErrorIs(t, err, db.ErrInvalid, "%+v", bad)
	}

	c1, err := s.CommandInsert(ctx, nc("e1"))
	require.NoError(t, err)
	require.Equal(t, db.Command{ID: c1.ID, PlatformEventID: "e1", ThreadKey: "slack:T:C:1", UserID: "U1",
		Command: "reset", Owner: "a", Delivery: c1.Delivery, CreatedAt: utcMicro(start)}, c1)
	require.JSONEq(t, string(dl), string(c1.Delivery))
	_, err = s.CommandInsert(ctx, nc("e1"))
	require.ErrorIs(t, err, db.ErrDuplicate, "a second delivery of the event records nothing")
	priv := nc("e2")
	priv.Private, priv.Command = true, "admin destroy"
	c2, err := s.CommandInsert(ctx, priv)
	require.NoError(t, err)
	require.True(t, c2.Private)

	// The first answer stands; a huge or NUL answer is refused.
	require.NoError(t, s.CommandAnswer(ctx, c1.ID, "Reset: done."))
	require.NoError(t, s.CommandAnswer(ctx, c1.ID, "a second answer"))
	require.ErrorIs(t, s.CommandAnswer(ctx, c2.ID, strings.Repeat("x", db.MaxCommandAnswer+1)), db.ErrInvalid)
	require.ErrorIs(t, s.CommandAnswer(ctx, c2.ID, "a\x00b"), db.ErrInvalid)

	n, err := s.CommandPostFailed(ctx, c1.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	open, err := s.CommandsOpen(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, open, 2)
	require.Equal(t, c1.ID, open[0].ID)
	require.NotNil(t, open[0].Answer)
	require.Equal(t, "Reset: done.", *open[0].Answer)
	require.Equal(t, 1, open[0].Attempts)
	require.Nil(t, open[1].Answer, "not answered yet")
	page, err := s.CommandsOpen(ctx, c1.ID, 1)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, c2.ID, page[0].ID)

	// One claim wins.
	got, err := s.CommandClaim(ctx, c2.ID, "a", "b")
	require.NoError(t, err)
	require.Equal(t, "b", got.Owner)
	_, err = s.CommandClaim(ctx, c2.ID, "a", "c")
	require.ErrorIs(t, err, db.ErrConflict)

	// Posted: forgotten (twice is no error). The table holds only the commands in flight; a platform's
	// redelivery of a posted one is its adapter's dedupe.
	require.NoError(t, s.CommandDelete(ctx, c1.ID))
	require.NoError(t, s.CommandDelete(ctx, c1.ID))
	open, err = s.CommandsOpen(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, c2.ID, open[0].ID)
}
