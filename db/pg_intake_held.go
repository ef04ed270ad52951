package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
)

// heldIntakeAcquire bounds the wait for a lock connection seen idle: past it the turn is recorded
// the ordinary way (queued, in the group commit), since the caller's ack waits on this.
const heldIntakeAcquire = 5 * time.Millisecond

// TurnInsertHeld records t as TurnInsert does, and starts it in the same commit when it can (and when
// no other turn is being recorded: in a burst the group commit is cheaper): the
// statement also tries the thread's lock, on a lock connection, and when it got it and no unfinished
// turn of the thread belongs to another process, the turn is recorded running (owned by t.Owner) and
// the returned hold keeps the lock. Otherwise the turn is recorded queued and the hold is nil: the
// caller starts it the usual way (HoldThread, TurnStartFirst). One commit instead of two on the path
// from a message to its prompt: the caller must call it only for a turn it would start at once (its
// thread idle in this process, a sandbox slot granted), and must run the turn it starts.
//
// As TurnInsert, it returns ErrDuplicate for an event recorded before. On any other error the
// turn may have been recorded (the connection can fail after the commit): the caller looks it up
// (TurnGetByEvent); the lock, if it was taken, went with the discarded connection.
func (s *pgStore) TurnInsertHeld(ctx context.Context, t NewTurn) (Turn, Hold, error) {
	if err := t.check(); err != nil {
		return Turn{}, nil, err
	}
	t = t.clean()
	if !s.intake.takeAlone() {
		// Others are being recorded (a burst): the group commit serves them all at once.
		turn, err := s.intake.insert(ctx, t)
		return turn, nil, err
	}
	defer s.intake.doneAlone()
	conn := s.idleLockConn(ctx)
	if conn == nil {
		// Every lock connection is busy (as many turns running): the ordinary way.
		turn, err := s.intake.insert(ctx, t)
		return turn, nil, err
	}
	key := lockKey(s.ns, lockKindThread, t.ThreadKey)
	row, err := s.q.TurnInsertHeld(ctx, conn, pgsqlc.TurnInsertHeldParams{
		ThreadKey: t.ThreadKey, PlatformEventID: t.PlatformEventID, UserID: t.UserID, Prompt: t.Prompt,
		Now: pgTime(s.clock()), Delivery: t.Delivery, Owner: t.Owner, LockKey: key,
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Recorded before (ON CONFLICT): the lock, if the statement took it, is given back.
		s.unlockAndRelease(conn, key)
		return Turn{}, nil, duplicateTurn(t)
	case err != nil:
		discard(conn) // whatever it holds goes with it
		return Turn{}, nil, pgErr("insert turn for event "+t.PlatformEventID, err)
	}
	turn := fromPGTurn(pgsqlc.Turn{
		ID: row.ID, ThreadKey: row.ThreadKey, PlatformEventID: row.PlatformEventID, UserID: row.UserID,
		Prompt: row.Prompt, Status: row.Status, Answer: row.Answer, Error: row.Error, Usage: row.Usage,
		CreatedAt: row.CreatedAt, StartedAt: row.StartedAt, LastEventAt: row.LastEventAt,
		FinishedAt: row.FinishedAt, Delivery: row.Delivery, Owner: row.Owner, DeliveredAt: row.DeliveredAt,
	})
	if turn.Status != TurnRunning {
		if row.Held {
			s.unlockAndRelease(conn, key)
		} else {
			conn.Release()
		}
		return turn, nil, nil
	}
	h, err := s.watched(conn, key)
	if err != nil {
		// Closing: the hold is released already. The turn is recorded running; the caller ends it.
		return turn, nil, fmt.Errorf("db: insert turn for event %s: hold thread: %w", t.PlatformEventID, err)
	}
	return turn, h, nil
}

// idleLockConn returns a lock connection if one is idle now, or if the pool has room to open one;
// nil when every lock connection is taken. A connection taken from under us (idle when looked at)
// is waited for at most heldIntakeAcquire.
func (s *pgStore) idleLockConn(ctx context.Context) *pgxpool.Conn {
	if s.closed.Err() != nil {
		return nil
	}
	st := s.lockPool.Stat()
	switch {
	case st.IdleConns() > 0:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, heldIntakeAcquire)
		defer cancel()
	case st.TotalConns() >= st.MaxConns():
		return nil
	}
	conn, err := s.lockPool.Acquire(ctx)
	if err != nil {
		return nil
	}
	return conn
}

// unlockAndRelease gives key back and returns the connection to the pool; if the unlock fails, the
// connection is closed instead, which ends its locks.
func (s *pgStore) unlockAndRelease(conn *pgxpool.Conn, key int64) {
	ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	defer cancel()
	if _, err := s.q.LockRelease(ctx, conn, key); err != nil {
		discard(conn)
		return
	}
	conn.Release()
}
