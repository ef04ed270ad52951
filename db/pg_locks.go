package db

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errClosed is returned by lock calls on a closed store.
var errClosed = errors.New("db: store is closed")

// Bounds for the housekeeping calls that run on a background context: unlocking, closing a discarded
// connection, asking the server to cancel a lock wait.
const (
	unlockTimeout = 5 * time.Second
	cancelTimeout = 5 * time.Second
)

// pgHold is one session-level advisory lock, held by its own connection from the lock pool.
type pgHold struct {
	s    *pgStore
	conn *pgxpool.Conn
	key  int64
	once sync.Once
	// stopWatch (leader only) stops the goroutine reading the connection before it is reused.
	stopWatch func()
	// afterRelease (leader only) signals the loss of leadership.
	afterRelease func()
}

func (s *pgStore) LockThread(ctx context.Context, threadKey string) (func(), error) {
	if err := checkThreadKey(threadKey); err != nil {
		return nil, err
	}
	unlock, err := s.advisoryLock(ctx, lockKey(s.ns, lockKindThread, threadKey))
	if err != nil {
		return nil, fmt.Errorf("db: lock thread %s: %w", threadKey, err)
	}
	return unlock, nil
}

// advisoryLock blocks until it holds key on a dedicated connection, or ctx ends.
func (s *pgStore) advisoryLock(ctx context.Context, key int64) (func(), error) {
	conn, err := s.acquireConn(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.waitLock(ctx, conn, key); err != nil {
		// Whatever state the server is in, closing the connection drops any lock it got.
		discard(conn)
		return nil, err
	}
	h := &pgHold{s: s, conn: conn, key: key}
	if err := s.register(h); err != nil {
		return nil, err
	}
	return h.release, nil
}

func (s *pgStore) acquireConn(ctx context.Context) (*pgxpool.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closed, cancel)()
	conn, err := s.lockPool.Acquire(ctx)
	if err != nil {
		if s.closed.Err() != nil {
			return nil, errClosed
		}
		return nil, fmt.Errorf("acquire lock connection: %w", err)
	}
	return conn, nil
}

// waitLock runs pg_advisory_lock. pgx answers a cancelled context by timing out the socket read,
// which would leave the server still queued for the lock; so on cancel we also send a cancel request,
// which ends the server-side wait. If the context ends just as the lock is granted, waitLock reports
// the context error and the caller discards the connection, dropping the lock.
func (s *pgStore) waitLock(ctx context.Context, conn *pgxpool.Conn, key int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closed, cancel)()

	pgc := conn.Conn().PgConn()
	cancelSent := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelSent)
		cctx, ccancel := context.WithTimeout(context.Background(), cancelTimeout)
		defer ccancel()
		_ = pgc.CancelRequest(cctx)
	})
	err := s.q.LockAcquire(ctx, conn, key)
	if !stop() {
		// The cancel request is (or was) in flight; wait for it so no goroutine outlives the call.
		<-cancelSent
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// The server may answer our cancel request ("canceling statement due to user request")
		// before pgx sees the context end: the reason is still the caller's context.
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if err != nil && s.closed.Err() != nil {
		return errClosed
	}
	return err
}

// register records a hold so that Close can release it. On a closed store it releases at once:
// Close has already taken its snapshot, and pgxpool.Close would wait for this connection forever.
func (s *pgStore) register(h *pgHold) error {
	s.mu.Lock()
	closed := s.closed.Err() != nil
	if !closed {
		s.holds[h] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		h.release()
		return errClosed
	}
	return nil
}

func (s *pgStore) forget(h *pgHold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.holds, h)
}

// release unlocks and returns the connection to the pool. If the unlock fails (the connection is
// dead, or the lock was already gone) the connection is closed instead, which ends its locks.
func (h *pgHold) release() {
	h.once.Do(func() {
		if h.stopWatch != nil {
			h.stopWatch()
		}
		ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
		defer cancel()
		if ok, err := h.s.q.LockRelease(ctx, h.conn, h.key); err != nil || !ok {
			discard(h.conn)
		} else {
			h.conn.Release()
		}
		h.s.forget(h)
		if h.afterRelease != nil {
			h.afterRelease()
		}
	})
}

// discard takes a connection out of the pool and closes it.
func discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	defer cancel()
	_ = c.Close(ctx)
}

// pgLeader is a watched hold (leadership, a thread, an instance): the advisory lock, plus a goroutine
// that notices when the connection holding it dies.
type pgLeader struct {
	hold *pgHold
	// lost is cancelled when the hold ends; Lost is its Done channel.
	lost     context.Context
	markLost context.CancelFunc
	done     chan struct{} // closed when the watcher returns
}

func (s *pgStore) TryLeader(ctx context.Context) (Leader, bool, error) {
	key := lockKey(s.ns, lockKindLeader, "")
	conn, err := s.acquireConn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("db: try leader: %w", err)
	}
	ok, err := s.q.LockTryAcquire(ctx, conn, key)
	if err != nil {
		discard(conn)
		return nil, false, fmt.Errorf("db: try leader: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	l, err := s.watched(conn, key)
	if err != nil {
		return nil, false, fmt.Errorf("db: try leader: %w", err)
	}
	return l, true, nil
}

func (s *pgStore) HoldThread(ctx context.Context, threadKey string) (Hold, error) {
	if err := checkThreadKey(threadKey); err != nil {
		return nil, err
	}
	h, err := s.holdWatched(ctx, lockKey(s.ns, lockKindThread, threadKey))
	if err != nil {
		return nil, fmt.Errorf("db: lock thread %s: %w", threadKey, err)
	}
	return h, nil
}

func (s *pgStore) HoldInstance(ctx context.Context, instance string) (Hold, error) {
	if instance == "" {
		return nil, invalidf("empty instance id")
	}
	h, err := s.holdWatched(ctx, lockKey(s.ns, lockKindInstance, instance))
	if err != nil {
		return nil, fmt.Errorf("db: hold instance %s: %w", instance, err)
	}
	return h, nil
}

// InstanceAlive tries the instance's lock on a connection of its own: if it can be had, nobody holds
// it, and it is given back at once.
func (s *pgStore) InstanceAlive(ctx context.Context, instance string) (bool, error) {
	if instance == "" {
		return false, nil
	}
	key := lockKey(s.ns, lockKindInstance, instance)
	// A query connection, not a lock one: the caller may hold a thread's lock connection, and with
	// every lock connection so held (a takeover of as many threads at once) a wait for another
	// would never end. The try-lock is released before the connection goes back.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("db: instance %s alive: acquire connection: %w", instance, err)
	}
	got, err := s.q.LockTryAcquire(ctx, conn, key)
	if err != nil {
		discard(conn)
		return false, fmt.Errorf("db: instance %s alive: %w", instance, err)
	}
	if !got {
		conn.Release()
		return true, nil
	}
	(&pgHold{s: s, conn: conn, key: key}).release()
	return false, nil
}

// holdWatched blocks until it holds key, then watches the connection so the hold reports its loss.
func (s *pgStore) holdWatched(ctx context.Context, key int64) (*pgLeader, error) {
	conn, err := s.acquireConn(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.waitLock(ctx, conn, key); err != nil {
		discard(conn)
		return nil, err
	}
	return s.watched(conn, key)
}

// watched wraps a connection that holds key in a hold whose Lost closes when the connection dies.
func (s *pgStore) watched(conn *pgxpool.Conn, key int64) (*pgLeader, error) {
	lost, markLost := context.WithCancel(context.Background())
	l := &pgLeader{lost: lost, markLost: markLost, done: make(chan struct{})}
	wctx, stop := context.WithCancel(context.Background())
	l.hold = &pgHold{
		s: s, conn: conn, key: key,
		stopWatch:    func() { stop(); <-l.done },
		afterRelease: l.markLost,
	}
	go l.watch(wctx, conn.Conn().PgConn())
	if err := s.register(l.hold); err != nil {
		return nil, err
	}
	return l, nil
}

// watch blocks reading the idle connection. The read returns only when ctx ends (Release) or the
// connection fails: the backend was terminated, the server restarted, the network dropped. So loss
// is noticed as it happens, without polling.
func (l *pgLeader) watch(ctx context.Context, pgc *pgconn.PgConn) {
	defer close(l.done)
	for {
		err := pgc.WaitForNotification(ctx)
		if err == nil {
			continue // a notification nobody subscribed to; keep waiting
		}
		if ctx.Err() == nil {
			l.markLost()
		}
		return
	}
}

func (l *pgLeader) Lost() <-chan struct{}    { return l.lost.Done() }
func (l *pgLeader) Context() context.Context { return l.lost }
func (l *pgLeader) Release()                 { l.hold.release() }
