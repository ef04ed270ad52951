package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// heldIntake is the optional store method that records a turn and starts it under its thread's lock
// in one commit (PostgreSQL).
type heldIntake interface {
	TurnInsertHeld(ctx context.Context, t db.NewTurn) (db.Turn, db.Hold, error)
}

// requireLocked fails unless the thread's lock is held elsewhere: a wait for it ends only by its
// deadline.
func requireLocked(t *testing.T, s db.Store, thread string, held bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	unlock, err := s.LockThread(ctx, thread)
	if !held {
		require.NoError(t, err, "the lock of %s is free", thread)
		unlock()
		return
	}
	require.ErrorIs(t, err, context.DeadlineExceeded, "the lock of %s is held", thread)
}

// testTurnInsertHeld: a turn of a thread whose lock is free and which has no other process's
// unfinished turn is recorded running in the insert, with the lock held by the returned hold; a
// duplicate, a thread locked elsewhere, or another owner's unfinished turn records nothing started
// and leaves the lock as it was.
func testTurnInsertHeld(t *testing.T, newStore NewStore) {
	s := newStore(t)
	hi, ok := s.(heldIntake)
	if !ok {
		t.Skip("this store starts turns the usual way (TurnStartFirst)")
	}
	ctx := testCtx(t)
	insertHeld := func(thread, ev, owner string) (db.Turn, db.Hold, error) {
		nt := newTurn(thread, ev, "p")
		nt.Owner = owner
		return hi.TurnInsertHeld(ctx, nt)
	}

	// Idle thread: started in the same commit, the lock held until the hold is released.
	tr, h, err := insertHeld("k", "e1", "A")
	require.NoError(t, err)
	require.NotNil(t, h)
	require.Equal(t, db.TurnRunning, tr.Status)
	require.Equal(t, "A", tr.Owner)
	require.Equal(t, tr.CreatedAt, tr.StartedAt, "started in the insert's commit")
	got, err := s.TurnGet(ctx, tr.ID)
	require.NoError(t, err)
	require.Equal(t, db.TurnRunning, got.Status)
	requireLocked(t, s, "k", true)

	// The same event again: a duplicate; the lock stays where it was.
	_, h2, err := insertHeld("k", "e1", "A")
	require.ErrorIs(t, err, db.ErrDuplicate)
	require.Nil(t, h2)
	requireLocked(t, s, "k", true)

	// Locked elsewhere (by the hold above): recorded queued, no hold.
	q, h3, err := insertHeld("k", "e2", "A")
	require.NoError(t, err)
	require.Nil(t, h3)
	require.Equal(t, db.TurnQueued, q.Status)
	h.Release()
	requireLocked(t, s, "k", false)

	// Another process's unfinished turn in the thread: recorded queued, and the lock given back.
	insertOwned(ctx, t, s, "k2", "dead-1", "dead")
	q2, h4, err := insertHeld("k2", "e3", "A")
	require.NoError(t, err)
	require.Nil(t, h4)
	require.Equal(t, db.TurnQueued, q2.Status)
	requireLocked(t, s, "k2", false)

	// Invalid input is refused before anything is written.
	_, _, err = insertHeld("", "e4", "A")
	require.ErrorIs(t, err, db.ErrInvalid)
}
