package db_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// The loop queries as the background loops run them (DESIGN §6, §9), for the EXPLAIN checks and the
// benchmarks. Each runs one batch against a store filled by db.BulkFill.

const (
	fillRows  = 100_000
	loopBatch = 100
)

// fillNow is the fill's reference time; the cutoffs below are relative to it.
var fillNow = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

type loopQuery struct {
	name string
	// sorts: the query may sort its rows (a small result). The others page or take the oldest
	// first, and must read them in order from an index: a sort reads every matching row per batch.
	sorts bool
	// run executes one batch and returns how many rows it got.
	run func(ctx context.Context, s db.Store) (int, error)
}

// loopQueries are the queries on a table filled with n rows.
func loopQueries(n int) []loopQuery {
	ids := make([]string, loopBatch)
	for i := range ids {
		ids[i] = db.FillSandboxID(i * (n / loopBatch)) // spread over the table
	}
	return []loopQuery{
		{"idle_active", false, func(ctx context.Context, s db.Store) (int, error) {
			r, err := s.SessionsIdle(ctx, fillNow.Add(-time.Hour), loopBatch)
			return len(r), err
		}},
		{"paused_expired", false, func(ctx context.Context, s db.Store) (int, error) {
			r, err := s.SessionsPausedExpired(ctx, fillNow.Add(-7*24*time.Hour), loopBatch)
			return len(r), err
		}},
		{"unsettled", false, func(ctx context.Context, s db.Store) (int, error) {
			r, err := s.SessionsUnsettled(ctx, fillNow.Add(-time.Hour), loopBatch)
			return len(r), err
		}},
		{"by_status_page", false, func(ctx context.Context, s db.Store) (int, error) {
			// A middle page of the admin listing over the most common status.
			r, err := s.SessionsByStatus(ctx, db.SessionDestroyed, "slack:T1:C250", loopBatch)
			return len(r), err
		}},
		{"pending_turns", false, func(ctx context.Context, s db.Store) (int, error) {
			r, err := s.TurnsPending(ctx, 0, loopBatch)
			return len(r), err
		}},
		{"by_sandbox_id", true, func(ctx context.Context, s db.Store) (int, error) {
			r, err := s.SessionsBySandboxIDs(ctx, ids)
			return len(r), err
		}},
		// PostgreSQL may read the pending turns (queued or running: as many as are live) and sort
		// them, which it finds cheaper than the running-only index; both are bounded by live work.
		{"stuck_turns", true, func(ctx context.Context, s db.Store) (int, error) {
			r, err := s.TurnsStuck(ctx, fillNow.Add(-10*time.Minute), loopBatch)
			return len(r), err
		}},
	}
}

// filledStore opens a store of the given engine and fills it with n sessions and n turns.
func filledStore(t testing.TB, engine string, n int) db.Store {
	t.Helper()
	var s db.Store
	switch engine {
	case "postgres":
		s = dbtest.OpenPostgres(t)
	case "sqlite":
		s = dbtest.OpenSQLite(t)
	default:
		t.Fatalf("engine %q", engine)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	require.NoError(t, db.BulkFill(ctx, s, db.Fill{N: n, Now: fillNow}))
	t.Logf("%s: filled %d sessions and %d turns in %v", engine, n, n, time.Since(began).Round(time.Millisecond))
	return s
}

// captureQuery runs q and returns the last statement the store sent, with its arguments.
func captureQuery(t testing.TB, s db.Store, q loopQuery) (string, []any) {
	t.Helper()
	var (
		mu    sync.Mutex
		query string
		args  []any
	)
	stop := db.RecordQueries(s, func(qs string, as []any) {
		mu.Lock()
		defer mu.Unlock()
		query, args = qs, as
	})
	defer stop()
	n, err := q.run(context.Background(), s)
	require.NoError(t, err)
	require.Positive(t, n, "%s finds rows in the filled table", q.name)
	require.LessOrEqual(t, n, loopBatch, "%s is batched", q.name)
	mu.Lock()
	defer mu.Unlock()
	return query, args
}

// TestLoopQueryPlans fills 100,000 sessions and turns and checks each loop query's plan: on
// Postgres (EXPLAIN after ANALYZE, both the plan for these arguments and the generic plan a cached
// prepared statement may switch to) and on SQLite (EXPLAIN QUERY PLAN; 5,000 rows under -race).
// Run with -v to see the plans.
func TestLoopQueryPlans(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dbtest.PostgresURL(t)
		s := filledStore(t, "postgres", fillRows)
		for _, q := range loopQueries(fillRows) {
			query, args := captureQuery(t, s, q)
			for _, generic := range []bool{false, true} {
				plan, err := db.Explain(context.Background(), s, query, args, generic)
				require.NoError(t, err)
				t.Logf("%s (generic=%v):\n%s", q.name, generic, plan)
				require.Contains(t, plan, "Index", "%s must use an index", q.name)
				require.NotContains(t, plan, "Seq Scan", "%s must not scan a table", q.name)
				if !q.sorts {
					require.NotContains(t, plan, "Sort", "%s must read its rows in order from an index", q.name)
				}
			}
		}
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		// Same shape, smaller under -race (see raceEnabled); ANALYZE makes the plans comparable.
		n := fillRows
		if raceEnabled {
			n = 5_000
		}
		s := filledStore(t, "sqlite", n)
		for _, q := range loopQueries(n) {
			query, args := captureQuery(t, s, q)
			plan, err := db.Explain(context.Background(), s, query, args, false)
			require.NoError(t, err)
			t.Logf("%s:\n%s", q.name, plan)
			require.Contains(t, plan, "INDEX", "%s must use an index", q.name)
			if !q.sorts {
				require.NotContains(t, plan, "TEMP B-TREE", "%s must read its rows in order from an index", q.name)
			}
			for _, line := range strings.Split(plan, "\n") {
				if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "INDEX") {
					t.Errorf("%s scans a table: %s", q.name, line)
				}
			}
		}
	})
}
