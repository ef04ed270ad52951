package db

// Test-only access to the stores' internals, for the engine-specific tests, the EXPLAIN checks and
// the benchmarks in package db_test.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
	"github.com/threadbox/threadbox/db/internal/sqlitesqlc"
)

// ThreadLockKey is the advisory-lock key a Postgres store uses for threadKey.
func ThreadLockKey(s Store, threadKey string) int64 {
	return lockKey(s.(*pgStore).ns, lockKindThread, threadKey)
}

// LeaderLockKey is the advisory-lock key of a Postgres store's leader lock.
func LeaderLockKey(s Store) int64 { return lockKey(s.(*pgStore).ns, lockKindLeader, "") }

// LockKey exposes the hash for its stability test.
var LockKey = lockKey

// LiveThreadMutexes is how many per-key mutexes a SQLite store keeps.
func LiveThreadMutexes(s Store) int { return s.(*sqliteStore).threads.len() }

// RecordQueries makes s call fn with each statement's SQL and arguments before running it, until
// the returned stop is called. Not safe while other goroutines use s.
func RecordQueries(s Store, fn func(query string, args []any)) (stop func()) {
	switch s := s.(type) {
	case *pgStore:
		prev, prevRelaxed := s.dbtx, s.relaxed
		s.dbtx, s.relaxed = pgRecorder{DBTX: prev, fn: fn}, pgRecorder{DBTX: prevRelaxed, fn: fn}
		return func() { s.dbtx, s.relaxed = prev, prevRelaxed }
	case *sqliteStore:
		prev := s.dbtx
		s.dbtx = sqliteRecorder{DBTX: prev, fn: fn}
		return func() { s.dbtx = prev }
	}
	panic(fmt.Sprintf("RecordQueries: %T", s))
}

type pgRecorder struct {
	pgsqlc.DBTX
	fn func(string, []any)
}

func (r pgRecorder) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	r.fn(query, args)
	return r.DBTX.Exec(ctx, query, args...)
}

func (r pgRecorder) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	r.fn(query, args)
	return r.DBTX.Query(ctx, query, args...)
}

func (r pgRecorder) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	r.fn(query, args)
	return r.DBTX.QueryRow(ctx, query, args...)
}

type sqliteRecorder struct {
	sqlitesqlc.DBTX
	fn func(string, []any)
}

func (r sqliteRecorder) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.fn(query, args)
	return r.DBTX.ExecContext(ctx, query, args...)
}

func (r sqliteRecorder) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.fn(query, args)
	return r.DBTX.QueryContext(ctx, query, args...)
}

func (r sqliteRecorder) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r.fn(query, args)
	return r.DBTX.QueryRowContext(ctx, query, args...)
}

// Explain returns the plan of query run with args. On Postgres generic selects the plan a cached
// prepared statement ends up with (plan_cache_mode=force_generic_plan) instead of one made for
// these argument values; SQLite has one kind of plan (EXPLAIN QUERY PLAN) and ignores it.
func Explain(ctx context.Context, s Store, query string, args []any, generic bool) (string, error) {
	switch s := s.(type) {
	case *pgStore:
		return explainPG(ctx, s, query, args, generic)
	case *sqliteStore:
		rows, err := s.sqlDB.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			return "", err
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				return "", err
			}
			lines = append(lines, detail)
		}
		return strings.Join(lines, "\n"), rows.Err()
	}
	return "", fmt.Errorf("Explain: %T", s)
}

func explainPG(ctx context.Context, s *pgStore, query string, args []any, generic bool) (string, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	// The session settings below must not leak into the pool.
	defer discard(conn)
	explain := "EXPLAIN " + query
	if generic {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, "PREPARE tb_explain AS "+query); err != nil {
			return "", err
		}
		params := make([]string, len(args))
		for i := range args {
			params[i] = fmt.Sprintf("$%d", i+1)
		}
		explain = "EXPLAIN EXECUTE tb_explain(" + strings.Join(params, ", ") + ")"
	}
	// The simple protocol has pgx write the arguments into the text as literals, which EXPLAIN
	// EXECUTE needs: it takes no bind parameters of its own.
	rows, err := conn.Query(ctx, explain, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// SQLitePragma reads a pragma on one of a SQLite store's pooled connections.
func SQLitePragma(ctx context.Context, s Store, name string) (string, error) {
	var v string
	err := s.(*sqliteStore).sqlDB.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v)
	return v, err
}

// SeverLockConnections closes the sockets of every lock connection s holds, without unlocking or
// saying goodbye to the server: what a crash or a network cut looks like from the server's side.
func SeverLockConnections(s Store) {
	ps := s.(*pgStore)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for h := range ps.holds {
		_ = h.conn.Conn().PgConn().Conn().Close()
	}
}

// LockConnSetting reads a setting on one of a Postgres store's lock connections.
func LockConnSetting(ctx context.Context, s Store, name string) (string, error) {
	var v string
	err := s.(*pgStore).lockPool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// PoolSetting reads a setting on a connection of one of a Postgres store's pools: "query",
// "intake", "locks" or "relaxed".
func PoolSetting(ctx context.Context, s Store, pool, name string) (string, error) {
	ps := s.(*pgStore)
	p := map[string]*pgxpool.Pool{"query": ps.pool, "intake": ps.intakePool, "locks": ps.lockPool, "relaxed": ps.relaxedPool}[pool]
	var v string
	err := p.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// IntakeWaiting is how many TurnInserts wait for a batch of the Postgres intake (none taken yet).
func IntakeWaiting(s Store) int {
	in := s.(*pgStore).intake
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.waiting)
}

// IntakeConns is how many batches the Postgres intake commits at once.
const IntakeConns = intakeConns

// PoolSizes is the Postgres store's most connections for queries, for the intake and for locks.
func PoolSizes(s Store) (query, intake, locks int32) {
	ps := s.(*pgStore)
	return ps.pool.Config().MaxConns, ps.intakePool.Config().MaxConns, ps.lockPool.Config().MaxConns
}

// SetWarmWait bounds the warm pools' wait (WithWarmPools) until the returned restore is called.
func SetWarmWait(d time.Duration) (restore func()) {
	prev := warmWait
	warmWait = d
	return func() { warmWait = prev }
}

// SetShortIdle sets how long a replica short of connections keeps an idle one.
func SetShortIdle(d time.Duration) (restore func()) {
	prev := shortIdle
	shortIdle = d
	return func() { shortIdle = prev }
}

// TranscriptRowsRead runs s.TurnTranscript and returns its result and the ids of every row its
// statements returned from the database, newest first: the rows whose text the store read. It
// records the statements TurnTranscript sends (RecordQueries) and runs them again with the same
// arguments, reading only each row's first column (the id). Not safe while other goroutines use s.
func TranscriptRowsRead(ctx context.Context, s Store, threadKey string, l TranscriptLimit) ([]Turn, []int64, error) {
	type stmt struct {
		query string
		args  []any
	}
	var stmts []stmt
	stop := RecordQueries(s, func(q string, args []any) { stmts = append(stmts, stmt{q, args}) })
	turns, err := s.TurnTranscript(ctx, threadKey, l)
	stop()
	if err != nil {
		return nil, nil, err
	}
	var ids []int64
	for _, st := range stmts {
		got, err := firstColumnInts(ctx, s, st.query, st.args)
		if err != nil {
			return nil, nil, err
		}
		ids = append(ids, got...)
	}
	return turns, ids, nil
}

func firstColumnInts(ctx context.Context, s Store, query string, args []any) ([]int64, error) {
	var out []int64
	switch s := s.(type) {
	case *pgStore:
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				return nil, err
			}
			id, ok := v[0].(int64)
			if !ok {
				return nil, fmt.Errorf("first column is %T", v[0])
			}
			out = append(out, id)
		}
		return out, rows.Err()
	case *sqliteStore:
		rows, err := s.sqlDB.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			dest := make([]any, len(cols))
			for i := range dest {
				dest[i] = new(any)
			}
			var id int64
			dest[0] = &id
			if err := rows.Scan(dest...); err != nil {
				return nil, err
			}
			out = append(out, id)
		}
		return out, rows.Err()
	}
	return nil, fmt.Errorf("firstColumnInts: %T", s)
}

// ExecSQL runs a statement on a store's database, for tests that fake what another binary did.
func ExecSQL(ctx context.Context, s Store, query string) error {
	switch s := s.(type) {
	case *pgStore:
		_, err := s.pool.Exec(ctx, query)
		return err
	case *sqliteStore:
		_, err := s.sqlDB.ExecContext(ctx, query)
		return err
	}
	return fmt.Errorf("ExecSQL: %T", s)
}
