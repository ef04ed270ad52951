package db_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// The Postgres intake commits concurrent TurnInserts together (group commit). These tests stop the
// intake's commits with a table lock held from outside, line requests up behind it, then let go.

type insertResult struct {
	turn db.Turn
	err  error
}

// intakeRig is a store on its own schema and a connection that can lock its turns table.
type intakeRig struct {
	t     *testing.T
	s     db.Store
	admin *pgx.Conn
	tx    pgx.Tx
	// blockers are the inserts the intake took first: they hold its connections, waiting on the lock.
	blockers []chan insertResult
}

func newIntakeRig(t *testing.T) *intakeRig {
	url := dbtest.PostgresSchemaURL(t)
	s := dbtest.OpenURL(t, url, db.WithMigrate())
	admin, err := pgx.Connect(pgCtx(t), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	return &intakeRig{t: t, s: s, admin: admin}
}

func (r *intakeRig) insert(ctx context.Context, event, prompt string) chan insertResult {
	return r.insertTurn(ctx, db.NewTurn{ThreadKey: "slack:T:C:1", PlatformEventID: event, Prompt: prompt, Owner: "i1"})
}

func (r *intakeRig) insertTurn(ctx context.Context, nt db.NewTurn) chan insertResult {
	ch := make(chan insertResult, 1)
	go func() {
		tn, err := r.s.TurnInsert(ctx, nt)
		ch <- insertResult{tn, err}
	}()
	return ch
}

// lock takes the turns table so that no insert can commit, and lets the intake's connections run
// into it, one blocked insert each, so that what comes next waits in line for a batch.
func (r *intakeRig) lock() {
	ctx := pgCtx(r.t)
	tx, err := r.admin.Begin(ctx)
	require.NoError(r.t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE turns IN SHARE MODE")
	require.NoError(r.t, err)
	r.tx = tx
	for i := range db.IntakeConns {
		r.blockers = append(r.blockers, r.insert(ctx, fmt.Sprintf("blocker-%d-%d", time.Now().UnixNano(), i), "x"))
		r.waitLockWaiters(i + 1)
	}
	require.Zero(r.t, db.IntakeWaiting(r.s))
}

// waitLockWaiters waits until n backends queue for the turns table's lock: observable server state.
func (r *intakeRig) waitLockWaiters(n int) {
	ctx := pgCtx(r.t)
	conn, err := pgx.Connect(ctx, r.admin.Config().ConnString())
	require.NoError(r.t, err)
	defer conn.Close(context.Background())
	require.Eventually(r.t, func() bool {
		var got int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'relation' AND relation = 'turns'::regclass AND NOT granted`).Scan(&got)
		return err == nil && got == n
	}, time.Minute, 5*time.Millisecond)
}

// queue starts an insert and waits until it waits for a batch, so that requests line up in order.
func (r *intakeRig) queue(ctx context.Context, event, prompt string) chan insertResult {
	return r.queueTurn(ctx, db.NewTurn{ThreadKey: "slack:T:C:1", PlatformEventID: event, Prompt: prompt, Owner: "i1"})
}

func (r *intakeRig) queueTurn(ctx context.Context, nt db.NewTurn) chan insertResult {
	before := db.IntakeWaiting(r.s)
	ch := r.insertTurn(ctx, nt)
	require.Eventually(r.t, func() bool { return db.IntakeWaiting(r.s) == before+1 }, time.Minute, time.Millisecond)
	return ch
}

// unlock lets the commits through and checks that the blockers were recorded.
func (r *intakeRig) unlock() {
	require.NoError(r.t, r.tx.Commit(pgCtx(r.t)))
	for _, b := range r.blockers {
		require.NoError(r.t, (<-b).err)
	}
	r.blockers = nil
}

// xmins is the distinct transaction ids that wrote the turns of events.
func (r *intakeRig) xmins(events []string) int {
	var n int
	require.NoError(r.t, r.admin.QueryRow(pgCtx(r.t),
		`SELECT count(DISTINCT xmin::text) FROM turns WHERE platform_event_id = ANY($1)`, events).Scan(&n))
	return n
}

// rows counts the turns recorded for event.
func (r *intakeRig) rows(event string) int {
	var n int
	require.NoError(r.t, r.admin.QueryRow(pgCtx(r.t), `SELECT count(*) FROM turns WHERE platform_event_id = $1`, event).Scan(&n))
	return n
}

// TestPostgresIntakeGroupCommit: inserts that arrive while the intake is busy are committed in one
// transaction, in their order, each caller getting its own row; duplicates (of a recorded event or
// within the batch) get ErrDuplicate, as they do one at a time.
func TestPostgresIntakeGroupCommit(t *testing.T) {
	t.Parallel()
	r := newIntakeRig(t)
	ctx := pgCtx(t)
	_, err := r.s.TurnInsert(ctx, db.NewTurn{ThreadKey: "slack:T:C:1", PlatformEventID: "old", Prompt: "x"})
	require.NoError(t, err)

	r.lock()
	var events []string
	var chans []chan insertResult
	for i := range 10 {
		ev := fmt.Sprint("e", i)
		events = append(events, ev)
		chans = append(chans, r.queue(ctx, ev, "prompt "+ev))
	}
	dupInBatch := r.queue(ctx, "e3", "again")
	dupOfOld := r.queue(ctx, "old", "again")
	r.unlock()

	var prev int64
	for i, ch := range chans {
		res := <-ch
		require.NoError(t, res.err)
		require.Equal(t, events[i], res.turn.PlatformEventID)
		require.Equal(t, "prompt "+events[i], res.turn.Prompt)
		require.Equal(t, db.TurnQueued, res.turn.Status)
		require.Equal(t, "i1", res.turn.Owner)
		require.Greater(t, res.turn.ID, prev, "ids follow the order of arrival")
		prev = res.turn.ID
		got, err := r.s.TurnGet(ctx, res.turn.ID)
		require.NoError(t, err)
		require.Equal(t, events[i], got.PlatformEventID)
	}
	require.ErrorIs(t, (<-dupInBatch).err, db.ErrDuplicate)
	require.ErrorIs(t, (<-dupOfOld).err, db.ErrDuplicate)
	require.Equal(t, 1, r.xmins(events), "one commit for the batch")
}

// TestPostgresIntakeBadRowFailsAlone: a row the server refuses (a NUL byte in its owner: prompts are
// made storable and user ids refused before) fails only its own caller; the others in its batch are recorded.
func TestPostgresIntakeBadRowFailsAlone(t *testing.T) {
	t.Parallel()
	r := newIntakeRig(t)
	ctx := pgCtx(t)
	r.lock()
	good1 := r.queue(ctx, "g1", "fine")
	// An owner (an instance id, internal, so not validated) that PostgreSQL cannot store: the row
	// passes the store's checks and fails in the batch.
	bad := r.queueTurn(ctx, db.NewTurn{ThreadKey: "slack:T:C:1", PlatformEventID: "bad", UserID: "U", Prompt: "fine", Owner: "i1\x00"})
	good2 := r.queue(ctx, "g2", "fine")
	r.unlock()

	require.NoError(t, (<-good1).err)
	require.NoError(t, (<-good2).err)
	err := (<-bad).err
	require.Error(t, err)
	require.NotErrorIs(t, err, db.ErrDuplicate)
	require.Zero(t, r.rows("bad"))
}

// TestPostgresIntakeCancelledBeforeBatch: a caller whose context ends while it waits for a batch
// gets the context's error and nothing is written; the batch goes on without it.
func TestPostgresIntakeCancelledBeforeBatch(t *testing.T) {
	t.Parallel()
	r := newIntakeRig(t)
	ctx := pgCtx(t)
	r.lock()
	cctx, cancel := context.WithCancel(ctx)
	gone := r.queue(cctx, "gone", "x")
	kept := r.queue(ctx, "kept", "x")
	cancel()
	require.ErrorIs(t, (<-gone).err, context.Canceled)
	require.Equal(t, 1, db.IntakeWaiting(r.s))
	r.unlock()
	require.NoError(t, (<-kept).err)
	require.Zero(t, r.rows("gone"))
}

// TestPostgresPoolSizes: without pool_max_conns the query pool has at least 8 connections (pgx alone
// gives 4 on a small host), pool_max_conns is obeyed, and the intake and lock pools are apart.
func TestPostgresPoolSizes(t *testing.T) {
	t.Parallel()
	q, in, locks := db.PoolSizes(dbtest.OpenPostgres(t, db.WithLockConns(5)))
	require.GreaterOrEqual(t, q, int32(8))
	require.Equal(t, int32(db.IntakeConns), in)
	require.Equal(t, int32(5), locks)

	q, _, _ = db.PoolSizes(dbtest.OpenURL(t, dbtest.PostgresSchemaURL(t)+"&pool_max_conns=3", db.WithMigrate()))
	require.Equal(t, int32(3), q)
}
