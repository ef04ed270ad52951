package db

import (
	"context"
	"fmt"
	"time"
)

// Fill describes the synthetic data BulkFill loads: N sessions and N turns, shaped like a busy
// deployment. For i in [0, N):
//   - session i has sandbox id FillSandboxID(i) and last activity (i*7919 mod 48h) seconds before Now;
//     i%10 in 0..5 is active (60%), 6..7 paused (20%, paused (i*104729 mod 30 days) seconds before Now),
//     8..9 destroyed (20%); i%100 == 5, one active in ten, is in error instead (1%: the reconcile loop's
//     candidates, last changed with their last activity);
//   - turn i belongs to session i, its last event is (i*6151 mod 2h) seconds before Now; i%100 == 0 is
//     running (1%), the rest done.
//
// The rows are generated inside the database (generate_series, a recursive CTE) in one statement per
// table: much faster than shipping 200,000 rows from Go, above all under -race.
type Fill struct {
	N   int
	Now time.Time
}

// FillSandboxID is the sandbox id BulkFill gives session i.
func FillSandboxID(i int) string { return fmt.Sprintf("sb-%07d", i) }

// BulkFill loads f into an empty, migrated store and refreshes the planner statistics.
func BulkFill(ctx context.Context, s Store, f Fill) error {
	switch s := s.(type) {
	case *pgStore:
		return fillPG(ctx, s, f)
	case *sqliteStore:
		return fillSQLite(ctx, s, f)
	}
	return fmt.Errorf("BulkFill: %T", s)
}

const pgFillSessions = `
INSERT INTO sessions (thread_key, platform, provider, handle, sandbox_id, generation, runtime, status,
    last_activity_at, paused_at, destroyed_at, created_at, updated_at)
SELECT format('slack:T1:C%s:%s', lpad((i % 500)::text, 3, '0'), lpad(i::text, 7, '0')), 'slack', 'docker',
    jsonb_build_object('provider', 'docker', 'id', 'sb-' || lpad(i::text, 7, '0'), 'version', 1),
    'sb-' || lpad(i::text, 7, '0'), 1, 'shell',
    CASE WHEN i % 100 = 5 THEN 'error' WHEN i % 10 < 6 THEN 'active' WHEN i % 10 < 8 THEN 'paused' ELSE 'destroyed' END,
    la, CASE WHEN i % 10 IN (6, 7) THEN $1::timestamptz - make_interval(secs => (i::bigint * 104729) % 2592000) END,
    CASE WHEN i % 10 >= 8 THEN la END, la - interval '1 hour', la
FROM (SELECT i, $1::timestamptz - make_interval(secs => (i::bigint * 7919) % 172800) AS la
      FROM generate_series(0, $2::int - 1) AS i) AS g`

const pgFillTurns = `
INSERT INTO turns (thread_key, platform_event_id, prompt, status, answer, created_at, started_at,
    last_event_at, finished_at)
SELECT format('slack:T1:C%s:%s', lpad((i % 500)::text, 3, '0'), lpad(i::text, 7, '0')), 'Ev' || lpad(i::text, 7, '0'),
    'prompt', CASE WHEN i % 100 = 0 THEN 'running' ELSE 'done' END, 'answer',
    le - interval '1 minute', le - interval '1 minute', le, CASE WHEN i % 100 <> 0 THEN le END
FROM (SELECT i, $1::timestamptz - make_interval(secs => (i::bigint * 6151) % 7200) AS le
      FROM generate_series(0, $2::int - 1) AS i) AS g`

func fillPG(ctx context.Context, s *pgStore, f Fill) error {
	for _, q := range []string{pgFillSessions, pgFillTurns} {
		if _, err := s.pool.Exec(ctx, q, dbTime(f.Now), f.N); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	_, err := s.pool.Exec(ctx, "ANALYZE sessions; ANALYZE turns")
	return err
}

// The SQLite fill writes times in the store's layout: strftime to seconds (Now has none to lose)
// plus a fixed ".000000Z".
const sqliteFillSessions = `
INSERT INTO sessions (thread_key, platform, provider, handle, sandbox_id, generation, runtime, status,
    last_activity_at, paused_at, destroyed_at, created_at, updated_at)
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < ?2 - 1)
SELECT printf('slack:T1:C%03d:%07d', i % 500, i), 'slack', 'docker',
    printf('{"provider":"docker","id":"sb-%07d","version":1}', i), printf('sb-%07d', i), 1, 'shell',
    CASE WHEN i % 100 = 5 THEN 'error' WHEN i % 10 < 6 THEN 'active' WHEN i % 10 < 8 THEN 'paused' ELSE 'destroyed' END,
    la || '.000000Z',
    CASE WHEN i % 10 IN (6, 7)
        THEN strftime('%Y-%m-%dT%H:%M:%S', ?1, printf('-%d seconds', (i * 104729) % 2592000)) || '.000000Z' END,
    CASE WHEN i % 10 >= 8 THEN la || '.000000Z' END,
    strftime('%Y-%m-%dT%H:%M:%S', la, '-1 hour') || '.000000Z', la || '.000000Z'
FROM (SELECT i, strftime('%Y-%m-%dT%H:%M:%S', ?1, printf('-%d seconds', (i * 7919) % 172800)) AS la FROM seq)`

const sqliteFillTurns = `
INSERT INTO turns (thread_key, platform_event_id, prompt, status, answer, created_at, started_at,
    last_event_at, finished_at)
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < ?2 - 1)
SELECT printf('slack:T1:C%03d:%07d', i % 500, i), printf('Ev%07d', i), 'prompt',
    CASE WHEN i % 100 = 0 THEN 'running' ELSE 'done' END, 'answer',
    strftime('%Y-%m-%dT%H:%M:%S', le, '-1 minute') || '.000000Z',
    strftime('%Y-%m-%dT%H:%M:%S', le, '-1 minute') || '.000000Z',
    le || '.000000Z', CASE WHEN i % 100 <> 0 THEN le || '.000000Z' END
FROM (SELECT i, strftime('%Y-%m-%dT%H:%M:%S', ?1, printf('-%d seconds', (i * 6151) % 7200)) AS le FROM seq)`

func fillSQLite(ctx context.Context, s *sqliteStore, f Fill) error {
	if f.Now.Truncate(time.Second) != f.Now {
		return fmt.Errorf("fill: Now must be whole seconds")
	}
	now := f.Now.UTC().Format("2006-01-02 15:04:05")
	for _, q := range []string{sqliteFillSessions, sqliteFillTurns} {
		if _, err := s.sqlDB.ExecContext(ctx, q, now, f.N); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	_, err := s.sqlDB.ExecContext(ctx, "ANALYZE")
	return err
}
