package db_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// Postgres-only behaviour: locks across processes (two stores stand in for two replicas) and what
// happens when the connection holding a lock dies.

func pgCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pgAdmin is a plain connection for poking at the server from outside the stores.
func pgAdmin(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := pgCtx(t)
	conn, err := pgx.Connect(ctx, dbtest.PostgresURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// lockHolders lists the backends that hold (granted) or wait for (!granted) an advisory key. A
// bigint key shows in pg_locks split into classid (high half) and objid (low half), objsubid 1.
func lockHolders(t *testing.T, admin *pgx.Conn, key int64, granted bool) []int32 {
	t.Helper()
	pids, err := queryHolders(pgCtx(t), admin, key, granted)
	require.NoError(t, err)
	return pids
}

func queryHolders(ctx context.Context, admin *pgx.Conn, key int64, granted bool) ([]int32, error) {
	u := uint64(key)
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid
		AND objsubid = 1 AND granted = $3`, int64(u>>32), int64(u&0xffffffff), granted)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// waitForWaiter waits until some backend queues for key: the observable state, not a sleep.
func waitForWaiter(t *testing.T, admin *pgx.Conn, key int64) {
	t.Helper()
	ctx := pgCtx(t)
	require.Eventually(t, func() bool {
		pids, err := queryHolders(ctx, admin, key, false)
		return err == nil && len(pids) == 1
	}, 30*time.Second, 5*time.Millisecond)
}

func terminate(t *testing.T, admin *pgx.Conn, pid int32) {
	t.Helper()
	var ok bool
	require.NoError(t, admin.QueryRow(pgCtx(t), "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
	require.True(t, ok)
}

// twoReplicas opens two stores on one fresh schema, as two replicas of one deployment would.
func twoReplicas(t *testing.T) (db.Store, db.Store) {
	url := dbtest.PostgresSchemaURL(t)
	return dbtest.OpenURL(t, url), dbtest.OpenURL(t, url)
}

func TestPostgresLockAcrossStores(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t)
	ctx := pgCtx(t)

	unlockA, err := a.LockThread(ctx, "slack:T:C:1")
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = b.LockThread(short, "slack:T:C:1")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "replica B must not get A's thread")

	unlockB2, err := b.LockThread(ctx, "slack:T:C:2")
	require.NoError(t, err, "other threads are free")
	unlockB2()

	events := make(chan string, 2)
	got := make(chan error, 1)
	go func() {
		unlock, err := b.LockThread(ctx, "slack:T:C:1")
		if err == nil {
			events <- "B locked"
			unlock()
		}
		got <- err
	}()
	events <- "A unlocking"
	unlockA()
	require.NoError(t, <-got)
	require.Equal(t, "A unlocking", <-events)
	require.Equal(t, "B locked", <-events)

	// One leader between the two.
	la, ok, err := a.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = b.TryLeader(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	la.Release()
	lb, ok, err := b.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok, "B leads once A released")
	lb.Release()
}

// TestPostgresLockHolderDies: when the connection holding a thread lock dies, the waiter gets it.
func TestPostgresLockHolderDies(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t)
	admin := pgAdmin(t)
	ctx := pgCtx(t)
	key := db.ThreadLockKey(a, "slack:T:C:1")

	unlockA, err := a.LockThread(ctx, "slack:T:C:1")
	require.NoError(t, err)
	holders := lockHolders(t, admin, key, true)
	require.Len(t, holders, 1)

	got := make(chan error, 1)
	go func() {
		unlock, err := b.LockThread(ctx, "slack:T:C:1")
		if err == nil {
			unlock()
		}
		got <- err
	}()
	// Wait until B is queued on the server, so the test shows a waiter being handed the lock.
	waitForWaiter(t, admin, key)
	select {
	case err := <-got:
		t.Fatalf("B returned while A held the lock: %v", err)
	default:
	}

	terminate(t, admin, holders[0])
	require.NoError(t, <-got, "the dead holder's lock passes to the waiter")

	unlockA() // on a dead connection: discarded quietly
	unlock, err := a.LockThread(ctx, "slack:T:C:1")
	require.NoError(t, err, "A's lock pool recovers")
	unlock()
}

// TestPostgresLockHolderCrashes: a holder whose socket just closes (a crashed process, a cut
// network) loses the lock to the waiter, and a leader that loses its socket notices.
func TestPostgresLockHolderCrashes(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t)
	admin := pgAdmin(t)
	ctx := pgCtx(t)
	_, err := a.LockThread(ctx, "slack:T:C:1")
	require.NoError(t, err)
	la, ok, err := a.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	got := make(chan error, 1)
	go func() {
		unlock, err := b.LockThread(ctx, "slack:T:C:1")
		if err == nil {
			unlock()
		}
		got <- err
	}()
	waitForWaiter(t, admin, db.ThreadLockKey(a, "slack:T:C:1"))

	db.SeverLockConnections(a)
	require.NoError(t, <-got)
	select {
	case <-la.Lost():
	case <-ctx.Done():
		t.Fatal("leader did not notice its connection closing")
	}
}

// TestPostgresLeaderLost: the leader notices at once when its connection is killed, and another
// replica can take over.
func TestPostgresLeaderLost(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t)
	admin := pgAdmin(t)
	ctx := pgCtx(t)

	la, ok, err := a.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	holders := lockHolders(t, admin, db.LeaderLockKey(a), true)
	require.Len(t, holders, 1)

	terminate(t, admin, holders[0])
	select {
	case <-la.Lost():
	case <-ctx.Done():
		t.Fatal("leader did not notice that its connection died")
	}
	la.Release()

	// The server drops the lock when the terminated backend has exited, just after the signal.
	var lb db.Leader
	require.Eventually(t, func() bool {
		l, ok, err := b.TryLeader(ctx)
		lb = l
		return err == nil && ok
	}, 30*time.Second, 5*time.Millisecond)
	lb.Release()
}

// TestPostgresCloseEndsWaits: closing a store ends its lock waits instead of hanging.
func TestPostgresCloseEndsWaits(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t)
	ctx := pgCtx(t)
	unlockA, err := a.LockThread(ctx, "k")
	require.NoError(t, err)
	defer unlockA()

	got := make(chan error, 1)
	go func() {
		_, err := b.LockThread(ctx, "k")
		got <- err
	}()
	admin := pgAdmin(t)
	waitForWaiter(t, admin, db.ThreadLockKey(b, "k"))
	require.NoError(t, b.Close())
	require.Error(t, <-got)
}

// TestPostgresLockNamespaces: schemas in one database do not share locks unless told to.
func TestPostgresLockNamespaces(t *testing.T) {
	t.Parallel()
	ctx := pgCtx(t)
	x := dbtest.OpenPostgres(t)
	y := dbtest.OpenPostgres(t)
	unlock, err := x.LockThread(ctx, "k")
	require.NoError(t, err)
	unlockY, err := y.LockThread(ctx, "k")
	require.NoError(t, err, "another schema is another deployment")
	unlockY()
	unlock()

	sx := dbtest.OpenPostgres(t, db.WithLockNamespace("shared"))
	sy := dbtest.OpenPostgres(t, db.WithLockNamespace("shared"))
	unlock, err = sx.LockThread(ctx, "k")
	require.NoError(t, err)
	defer unlock()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = sy.LockThread(short, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestPostgresMigrateConcurrent: replicas starting together all migrate without error.
func TestPostgresMigrateConcurrent(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresSchemaURL(t)
	ctx := pgCtx(t)
	stores := make([]db.Store, 5)
	for i := range stores {
		s, err := db.Open(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(stores))
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Migrate(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	want, err := stores[0].SchemaVersion(ctx)
	require.NoError(t, err)
	require.Positive(t, want)
	for _, s := range stores[1:] {
		v, err := s.SchemaVersion(ctx)
		require.NoError(t, err)
		require.Equal(t, want, v)
	}
}

// TestPostgresLockConnSettings: lock connections detect a dead peer quickly and are labelled.
func TestPostgresLockConnSettings(t *testing.T) {
	t.Parallel()
	s := dbtest.OpenPostgres(t)
	for name, want := range map[string]string{
		"tcp_keepalives_idle":     "30",
		"tcp_keepalives_interval": "10",
		"tcp_keepalives_count":    "3",
		"application_name":        "threadbox-locks",
	} {
		got, err := db.LockConnSetting(pgCtx(t), s, name)
		require.NoError(t, err)
		require.Equal(t, want, got, name)
	}
}

// TestPostgresThreadHoldLost: a thread hold notices at once when its connection is killed
// (pg_terminate_backend), and an instance whose liveness connection died is no longer alive.
func TestPostgresThreadHoldLost(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t)
	admin := pgAdmin(t)
	ctx := pgCtx(t)

	h, err := a.HoldThread(ctx, "slack:T:C:9")
	require.NoError(t, err)
	holders := lockHolders(t, admin, db.ThreadLockKey(a, "slack:T:C:9"), true)
	require.Len(t, holders, 1)
	terminate(t, admin, holders[0])
	select {
	case <-h.Lost():
	case <-ctx.Done():
		t.Fatal("thread hold did not notice that its connection died")
	}
	h.Release()

	inst, err := a.HoldInstance(ctx, "replica-a")
	require.NoError(t, err)
	alive, err := b.InstanceAlive(ctx, "replica-a")
	require.NoError(t, err)
	require.True(t, alive, "another replica sees a live instance")
	inst.Release()
	alive, err = b.InstanceAlive(ctx, "replica-a")
	require.NoError(t, err)
	require.False(t, alive)
}

// TestPostgresInstanceAliveWithEveryLockConnectionHeld: asking whether another instance is alive
// needs no lock connection, so a replica whose lock connections are all held by thread locks (a
// takeover of as many threads at once) still gets its answer instead of waiting for ever.
func TestPostgresInstanceAliveWithEveryLockConnectionHeld(t *testing.T) {
	t.Parallel()
	url := dbtest.PostgresSchemaURL(t)
	a := dbtest.OpenURL(t, url, db.WithLockConns(2))
	other := dbtest.OpenURL(t, url)
	ctx := pgCtx(t)
	for _, k := range []string{"slack:T:C:a", "slack:T:C:b"} {
		h, err := a.HoldThread(ctx, k)
		require.NoError(t, err)
		t.Cleanup(h.Release)
	}
	inst, err := other.HoldInstance(ctx, "replica-b")
	require.NoError(t, err)
	t.Cleanup(inst.Release)
	// Bounded, so that a regression fails rather than hangs.
	ask, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	alive, err := a.InstanceAlive(ask, "replica-b")
	require.NoError(t, err)
	require.True(t, alive)
	alive, err = a.InstanceAlive(ask, "replica-gone")
	require.NoError(t, err)
	require.False(t, alive)
}
