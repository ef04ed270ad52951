package dbtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// testTurnDelivery: a turn keeps where its reply goes and who owns it, and only its owner starts it.
func testTurnDelivery(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	nt := newTurn("k", "ev1", "hi")
	nt.Delivery, nt.Owner = json.RawMessage(`{"platform":"slack","channel":"C1"}`), "A"
	turn, err := s.TurnInsert(ctx, nt)
	require.NoError(t, err)
	require.JSONEq(t, `{"platform":"slack","channel":"C1"}`, string(turn.Delivery))
	require.Equal(t, "A", turn.Owner)

	_, err = s.TurnStart(ctx, turn.ID, "B")
	require.ErrorIs(t, err, db.ErrConflict, "a turn is started only by its owner")
	got, err := s.TurnStart(ctx, turn.ID, "A")
	require.NoError(t, err)
	require.Equal(t, db.TurnRunning, got.Status)
	require.JSONEq(t, `{"platform":"slack","channel":"C1"}`, string(got.Delivery))

	_, err = s.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "bad", Prompt: "x", Delivery: json.RawMessage(`{`)})
	require.ErrorIs(t, err, db.ErrInvalid, "delivery must be JSON")
}

// testTurnsPendingClaim: recovery pages through unfinished turns in order and claims them by
// compare-and-set, so two processes never both take one.
func testTurnsPendingClaim(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	var ids []int64
	for i, ev := range []string{"e1", "e2", "e3", "e4"} {
		tr := insertOwned(ctx, t, s, "k", ev, "dead")
		ids = append(ids, tr.ID)
		if i == 0 {
			_, err := s.TurnFinish(ctx, tr.ID, db.TurnResult{Status: db.TurnDone})
			require.NoError(t, err)
		}
	}
	_, err := s.TurnStart(ctx, ids[1], "dead")
	require.NoError(t, err)

	page, err := s.TurnsPending(ctx, 0, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1], ids[2]}, turnIDs(page), "finished turns are not pending; oldest first")
	page, err = s.TurnsPending(ctx, ids[2], 10)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[3]}, turnIDs(page))

	_, err = s.TurnClaim(ctx, ids[1], "dead", "me", db.TurnQueued)
	require.ErrorIs(t, err, db.ErrConflict, "a running turn is not claimed as queued (its owner started it since it was listed)")
	claimed, err := s.TurnClaim(ctx, ids[1], "dead", "me", db.TurnRunning)
	require.NoError(t, err)
	require.Equal(t, "me", claimed.Owner)
	require.Equal(t, db.TurnRunning, claimed.Status)
	_, err = s.TurnClaim(ctx, ids[1], "dead", "other", db.TurnRunning)
	require.ErrorIs(t, err, db.ErrConflict, "a second claim from the old owner loses")
	_, err = s.TurnClaim(ctx, ids[0], "dead", "me", db.TurnRunning)
	require.ErrorIs(t, err, db.ErrConflict, "finished turns cannot be claimed")
}

// testTurnsQueuedOwned: the adoption pass's listing holds only the owner's queued turns created at or
// before the cutoff, in id order and paged; running, finished, younger and other owners' turns are
// left out by the query, not by the caller.
func testTurnsQueuedOwned(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	first := insertOwned(ctx, t, s, "k1", "q1", "me")
	running := insertOwned(ctx, t, s, "k2", "r1", "me")
	_, err := s.TurnStart(ctx, running.ID, "me")
	require.NoError(t, err)
	done := insertOwned(ctx, t, s, "k3", "d1", "me")
	_, err = s.TurnFinish(ctx, done.ID, db.TurnResult{Status: db.TurnDone})
	require.NoError(t, err)
	insertOwned(ctx, t, s, "k1", "o1", "other")
	clock.Advance(time.Minute)
	atCutoff := insertOwned(ctx, t, s, "k4", "q2", "me")
	cutoff := clock.Now()
	clock.Advance(time.Second)
	insertOwned(ctx, t, s, "k5", "young", "me")

	got, err := s.TurnsQueuedOwned(ctx, "me", cutoff, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID, atCutoff.ID}, turnIDs(got))
	page, err := s.TurnsQueuedOwned(ctx, "me", cutoff, 0, 1)
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID}, turnIDs(page))
	page, err = s.TurnsQueuedOwned(ctx, "me", cutoff, first.ID, 1)
	require.NoError(t, err)
	require.Equal(t, []int64{atCutoff.ID}, turnIDs(page))
	got, err = s.TurnsQueuedOwned(ctx, "me", start.Add(-time.Second), 0, 10)
	require.NoError(t, err)
	require.Empty(t, got, "nothing was created before the cutoff")
	got, err = s.TurnsQueuedOwned(ctx, "nobody", cutoff, 0, 10)
	require.NoError(t, err)
	require.Empty(t, got)
}

// testTurnsRunningOwned: the adoption pass's listing of running turns holds only the owner's running
// turns started at or before the cutoff, in id order and paged; queued, finished, later-started and
// other owners' turns are left out by the query.
func testTurnsRunningOwned(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	startTurn := func(thread, event, owner string) db.Turn {
		tr := insertOwned(ctx, t, s, thread, event, owner)
		_, err := s.TurnStart(ctx, tr.ID, owner)
		require.NoError(t, err)
		return tr
	}
	first := startTurn("k1", "r1", "me")
	insertOwned(ctx, t, s, "k2", "q1", "me")
	done := startTurn("k3", "d1", "me")
	_, err := s.TurnFinish(ctx, done.ID, db.TurnResult{Status: db.TurnDone})
	require.NoError(t, err)
	startTurn("k4", "o1", "other")
	queuedLong := insertOwned(ctx, t, s, "k5", "q2", "me")
	clock.Advance(time.Minute)
	atCutoff := startTurn("k6", "r2", "me")
	cutoff := clock.Now()
	clock.Advance(time.Second)
	_, err = s.TurnStart(ctx, queuedLong.ID, "me") // created long ago, started after the cutoff
	require.NoError(t, err)

	got, err := s.TurnsRunningOwned(ctx, "me", cutoff, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID, atCutoff.ID}, turnIDs(got))
	page, err := s.TurnsRunningOwned(ctx, "me", cutoff, 0, 1)
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID}, turnIDs(page))
	page, err = s.TurnsRunningOwned(ctx, "me", cutoff, first.ID, 1)
	require.NoError(t, err)
	require.Equal(t, []int64{atCutoff.ID}, turnIDs(page))
	got, err = s.TurnsRunningOwned(ctx, "me", start.Add(-time.Second), 0, 10)
	require.NoError(t, err)
	require.Empty(t, got, "nothing was started before the cutoff")
	got, err = s.TurnsRunningOwned(ctx, "nobody", cutoff, 0, 10)
	require.NoError(t, err)
	require.Empty(t, got)
}

// testTurnLastFailedWith finds the newest failed turn with an exact error text (retry's lookup).
func testTurnLastFailedWith(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	const marker = "interrupted"
	_, err := s.TurnLastFailedWith(ctx, "k", marker)
	require.ErrorIs(t, err, db.ErrNotFound)
	var want int64
	for i, res := range []db.TurnResult{
		{Status: db.TurnFailed, Error: marker},
		{Status: db.TurnFailed, Error: marker},
		{Status: db.TurnFailed, Error: "other"},
		{Status: db.TurnDone},
	} {
		tr, err := s.TurnInsert(ctx, newTurn("k", "f"+string(rune('a'+i)), "p"))
		require.NoError(t, err)
		_, err = s.TurnFinish(ctx, tr.ID, res)
		require.NoError(t, err)
		if i == 1 {
			want = tr.ID
		}
	}
	got, err := s.TurnLastFailedWith(ctx, "k", marker)
	require.NoError(t, err)
	require.Equal(t, want, got.ID)
	_, err = s.TurnLastFailedWith(ctx, "other-thread", marker)
	require.ErrorIs(t, err, db.ErrNotFound)
}

// testInstances: an instance is alive exactly while it holds its liveness lock.
func testInstances(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	alive, err := s.InstanceAlive(ctx, "")
	require.NoError(t, err)
	require.False(t, alive, "the empty owner (turns from before owners existed) is never alive")
	alive, err = s.InstanceAlive(ctx, "i1")
	require.NoError(t, err)
	require.False(t, alive)

	h, err := s.HoldInstance(ctx, "i1")
	require.NoError(t, err)
	alive, err = s.InstanceAlive(ctx, "i1")
	require.NoError(t, err)
	require.True(t, alive)
	alive, err = s.InstanceAlive(ctx, "i2")
	require.NoError(t, err)
	require.False(t, alive)

	h.Release()
	h.Release() // idempotent
	<-h.Lost()
	alive, err = s.InstanceAlive(ctx, "i1")
	require.NoError(t, err)
	require.False(t, alive)
}

// testHoldThread: a thread hold excludes LockThread like a lock, and its Lost closes on Release.
func testHoldThread(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	h, err := s.HoldThread(ctx, "k")
	require.NoError(t, err)
	select {
	case <-h.Lost():
		t.Fatal("a fresh hold is not lost")
	default:
	}
	got := make(chan struct{})
	go func() {
		unlock, err := s.LockThread(ctx, "k")
		if err == nil {
			unlock()
		}
		close(got)
	}()
	h.Release()
	<-h.Lost()
	<-got
}

func turnIDs(ts []db.Turn) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// testTurnsUndelivered: a finished turn not yet posted is listed until it is marked delivered, and a
// live process claims it from a dead owner by compare-and-set.
func testTurnsUndelivered(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	tr := insertOwned(ctx, t, s, "k", "u1", "dead")
	page, err := s.TurnsUndelivered(ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, page, "a queued turn is not undelivered")
	_, err = s.TurnFinish(ctx, tr.ID, db.TurnResult{Status: db.TurnDone, Answer: "a"})
	require.NoError(t, err)
	page, err = s.TurnsUndelivered(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{tr.ID}, turnIDs(page))
	require.True(t, page[0].DeliveredAt.IsZero())

	claimed, err := s.TurnClaimUndelivered(ctx, tr.ID, "dead", "me")
	require.NoError(t, err)
	require.Equal(t, "me", claimed.Owner)
	_, err = s.TurnClaimUndelivered(ctx, tr.ID, "dead", "other")
	require.ErrorIs(t, err, db.ErrConflict)

	require.NoError(t, s.TurnMarkDelivered(ctx, tr.ID))
	require.NoError(t, s.TurnMarkDelivered(ctx, tr.ID), "idempotent")
	got, err := s.TurnGet(ctx, tr.ID)
	require.NoError(t, err)
	require.False(t, got.DeliveredAt.IsZero())
	page, err = s.TurnsUndelivered(ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, page)
	_, err = s.TurnClaimUndelivered(ctx, tr.ID, "me", "other")
	require.ErrorIs(t, err, db.ErrConflict, "a delivered turn is not claimed")
}

// testTurnStartFirst: a turn starts in one statement unless an older unfinished turn of its thread
// belongs to another process; its own older turns, finished ones and other threads' do not count.
func testTurnStartFirst(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	insert := func(thread, ev, owner string) db.Turn { return insertOwned(ctx, t, s, thread, ev, owner) }
	otherDone := insert("k", "e0", "B")
	_, err := s.TurnFinish(ctx, otherDone.ID, db.TurnResult{Status: db.TurnDone})
	require.NoError(t, err)
	insert("k2", "e1", "B") // another thread's
	mine := insert("k", "e2", "A")
	next := insert("k", "e3", "A")

	got, err := s.TurnStartFirst(ctx, mine.ID, "A")
	require.NoError(t, err, "only a finished turn of another process and another thread's are older")
	require.Equal(t, db.TurnRunning, got.Status)
	require.False(t, got.StartedAt.IsZero())
	_, err = s.TurnStartFirst(ctx, next.ID, "B")
	require.ErrorIs(t, err, db.ErrConflict, "only its owner starts a turn")

	// Its own older turn, still running, does not hold the next one (the queue orders them).
	_, err = s.TurnStartFirst(ctx, next.ID, "A")
	require.NoError(t, err)

	// An older turn of another process, queued or running, does: nothing changes.
	for _, status := range []db.TurnStatus{db.TurnQueued, db.TurnRunning} {
		older := insert("k3", "old-"+string(status), "dead")
		if status == db.TurnRunning {
			_, err = s.TurnStart(ctx, older.ID, "dead")
			require.NoError(t, err)
		}
		tr := insert("k3", "new-"+string(status), "A")
		_, err = s.TurnStartFirst(ctx, tr.ID, "A")
		require.ErrorIs(t, err, db.ErrConflict, "an older %s turn of another process", status)
		still, err := s.TurnGet(ctx, tr.ID)
		require.NoError(t, err)
		require.Equal(t, db.TurnQueued, still.Status)
		// Once the older one is answered, it starts.
		_, err = s.TurnFinish(ctx, older.ID, db.TurnResult{Status: db.TurnFailed, Error: "interrupted"})
		require.NoError(t, err)
		_, err = s.TurnStartFirst(ctx, tr.ID, "A")
		require.NoError(t, err)
	}
}
