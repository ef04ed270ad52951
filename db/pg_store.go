package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
)

// pgStore is the Postgres Store: sqlc queries over a pgx pool, plus a second pool whose connections
// hold session-level advisory locks.
type pgStore struct {
	pool     *pgxpool.Pool
	lockPool *pgxpool.Pool
	// intakePool is TurnInsert's own: a message's ack never waits behind the queries of running
	// turns for a connection (pg_intake.go).
	intakePool *pgxpool.Pool
	intake     *pgIntake
	// relaxedPool runs the writes whose loss in a server crash costs little, with
	// synchronous_commit off (see relaxedConns).
	relaxedPool *pgxpool.Pool
	// dbtx is what the queries run on: the pool, or a recorder around it in tests.
	dbtx pgsqlc.DBTX
	// relaxed is what the relaxed writes run on: relaxedPool, or a recorder around it in tests.
	relaxed pgsqlc.DBTX
	q       *pgsqlc.Queries
	now     func() time.Time
	// ns is mixed into every advisory-lock key (WithLockNamespace, default the current schema).
	ns string

	// closed is cancelled by Close, so that lock waits end and Close cannot hang on them.
	closed    context.Context
	markClose context.CancelFunc

	mu    sync.Mutex // protects the following
	holds map[*pgHold]struct{}
}

var _ Store = (*pgStore)(nil)

func openPostgres(ctx context.Context, url string, o options) (*pgStore, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn's message shows the URL with the password masked.
		return nil, fmt.Errorf("database.url: %w: %w", ErrBadURL, err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// Without this a black-holed host stalls Open for the kernel's TCP timeout (minutes).
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default is max(4, CPUs): on a small host, four connections for every running turn's
		// queries and the loops' (message intake has its own, pg_intake.go).
		cfg.MaxConns = max(cfg.MaxConns, defaultQueryConns)
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)

	// application_name tells the two pools apart in pg_stat_activity.
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "threadbox"
	}
	lockCfg := cfg.Copy()
	intakeCfg := cfg.Copy()
	relaxedCfg := cfg.Copy()
	relaxedCfg.MaxConns, relaxedCfg.MinConns = relaxedConns, 0
	relaxedCfg.ConnConfig.RuntimeParams["application_name"] += "-relaxed"
	// SET after connecting, not a startup parameter, for the same reason as the lock pool's below.
	relaxedCfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET synchronous_commit = off")
		return err
	}
	intakeCfg.MaxConns, intakeCfg.MinConns = intakeConns, 0
	intakeCfg.ConnConfig.RuntimeParams["application_name"] += "-intake"
	lockCfg.MaxConns = o.lockConns
	lockCfg.MinConns = 0
	lockCfg.ConnConfig.RuntimeParams["application_name"] += "-locks"
	// A lock holder that vanishes without closing its socket (a dead host) must lose its locks in
	// about a minute, not after the kernel's two-hour keepalive default. These are SET after
	// connecting rather than sent as startup parameters, which poolers such as PgBouncer refuse;
	// a server that rejects one (they are ignored on Unix sockets anyway) just keeps its default.
	lockCfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, set := range []string{
			"SET tcp_keepalives_idle = 30", "SET tcp_keepalives_interval = 10", "SET tcp_keepalives_count = 3",
		} {
			_, _ = c.Exec(ctx, set)
		}
		return nil
	}
	configs := []*pgxpool.Config{cfg, lockCfg, intakeCfg, relaxedCfg}
	onDemand := make([]*pgxpool.Config, len(configs))
	for i, c := range configs {
		onDemand[i] = c.Copy()
	}
	if o.warm {
		// Fixed-size pools (see WithWarmPools).
		if !strings.Contains(url, "pool_min_conns") {
			cfg.MinConns = cfg.MaxConns
		}
		intakeCfg.MinConns = intakeCfg.MaxConns
		relaxedCfg.MinConns = relaxedCfg.MaxConns
		lockCfg.MinConns = lockCfg.MaxConns
	}

	pools, err := openPools(ctx, configs, o.warm)
	if err != nil {
		return nil, fmt.Errorf("database.url: cannot connect to postgres at %s: %w", where, err)
	}
	if o.warm {
		// pgxpool opens MinConns in the background: wait for them, so that a replica is warm by the
		// time it listens. One deadline for all the pools.
		wctx, cancel := context.WithTimeout(ctx, warmWait)
		opened, wanted := 0, 0
		for _, p := range pools {
			warmPool(wctx, p)
			opened += int(min(established(p), p.Config().MinConns))
			wanted += int(p.Config().MinConns)
		}
		cancel()
		if opened < wanted {
			// The server is short of connections. Fixed-size pools would keep the ones they got for
			// good (pgxpool closes an idle connection only above MinConns), and a pool that got none
			// could never open one while the others hold the server's last slots: every turn's lock,
			// or every ack, would fail. So a short replica runs on pools that grow on demand and give
			// idle connections back soon (shortIdle), slower but whole, and serve says why.
			for _, c := range onDemand {
				c.MaxConnIdleTime, c.HealthCheckPeriod = shortIdle, min(c.HealthCheckPeriod, shortIdle)
			}
			// The slots just freed may be taken by another client before this ping: it waits out a
			// refusal for too many connections as the first one did (up to warmWait).
			closePools(pools)
			if pools, err = openPools(ctx, onDemand, true); err != nil {
				return nil, fmt.Errorf("database.url: cannot connect to postgres at %s: %w", where, err)
			}
		}
		if o.warmed != nil {
			o.warmed(opened, wanted)
		}
	}
	pool, lockPool, intakePool, relaxedPool := pools[0], pools[1], pools[2], pools[3]

	s := &pgStore{
		pool:        pool,
		lockPool:    lockPool,
		intakePool:  intakePool,
		relaxedPool: relaxedPool,
		dbtx:        pool,
		relaxed:     relaxedPool,
		q:           pgsqlc.New(),
		now:         o.now,
		holds:       make(map[*pgHold]struct{}),
	}
	s.intake = newPGIntake(s, intakePool, intakeConns)
	s.closed, s.markClose = context.WithCancel(context.Background())
	if o.lockNamespace != nil {
		s.ns = *o.lockNamespace
	} else if err := pool.QueryRow(ctx, "SELECT COALESCE(current_schema(), '')").Scan(&s.ns); err != nil {
		s.closePools()
		return nil, fmt.Errorf("database.url: postgres at %s: read current schema: %w", where, err)
	}
	return s, nil
}

// openPools opens the query, lock, intake and relaxed pools from their configs. The query pool first,
// pinged: a wrong URL or password fails here, once. waitFull makes the ping wait out a server full of
// connections (see ping).
func openPools(ctx context.Context, configs []*pgxpool.Config, waitFull bool) ([]*pgxpool.Pool, error) {
	pools := make([]*pgxpool.Pool, 0, len(configs))
	for i, c := range configs {
		p, err := pgxpool.NewWithConfig(ctx, c)
		if err == nil && i == 0 {
			if err = ping(ctx, p, waitFull); err != nil {
				p.Close()
			}
		}
		if err != nil {
			closePools(pools)
			return nil, err
		}
		pools = append(pools, p)
	}
	return pools, nil
}

func closePools(pools []*pgxpool.Pool) {
	for _, p := range pools {
		p.Close()
	}
}

// shortIdle is how long a replica short of connections keeps an idle one (a variable for a test).
var shortIdle = time.Minute

// warmPool waits until the pool has opened its MinConns connections, which pgxpool does in the
// background from its creation (acquiring them here as well would open up to twice as many), or ctx
// ends. It is best effort: a connection that fails to open is retried by the pool's health check,
// and the queries open their own meanwhile.
func warmPool(ctx context.Context, p *pgxpool.Pool) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for established(p) < p.Config().MinConns {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ping checks that the server answers. With warm pools, the query pool's own background connections
// race the ping for the server's last free slots: a refusal for too many connections (SQLSTATE
// 53300) is waited out while the pool opens them (up to warmWait), then the ping uses one of those.
func ping(ctx context.Context, p *pgxpool.Pool, warm bool) error {
	wctx, cancel := context.WithTimeout(ctx, warmWait)
	defer cancel()
	for {
		err := p.Ping(ctx)
		var pe *pgconn.PgError
		if err == nil || !warm || !errors.As(err, &pe) || pe.Code != "53300" {
			return err
		}
		select {
		case <-wctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// established counts the pool's open connections: pgxpool's total also counts those still being
// opened, which may yet fail.
func established(p *pgxpool.Pool) int32 {
	st := p.Stat()
	return st.TotalConns() - st.ConstructingConns()
}

// warmWait bounds the wait for the warm pools, all of them together (a variable for a test).
var warmWait = 10 * time.Second

// relaxedConns is the relaxed pool's size: its writes are single small statements, but every
// running turn's liveness touch goes through it.
//
// Relaxed writes (synchronous_commit off) return once committed in the server's memory, visible to
// every other connection at once, without waiting for the WAL flush: on this project's test disk a
// flush takes 1–2 ms and its tail tens. A server crash can lose the last ~0.6 s of them (three
// wal_writer_delay), never a later synchronous commit's. Only writes whose loss costs a repeat the
// design allows anyway are relaxed:
//   - SessionTouch: the idle timers count from the activity recorded before, so the idle pass may
//     pause the sandbox early (its files are kept; the next message resumes it), and the hand-off
//     note is the one before (the history replays the turns anyway);
//   - TurnTouch: the watchdog's clock, which counts in minutes.
//
// The SET is per connection, so a pooler in front of PostgreSQL must pin a server connection to
// each client connection (PgBouncer's session mode), as the advisory locks require anyway.
//
// A turn's insert (the ack), start (never run twice), outcome and delivery mark stay synchronous: a
// lost mark on a live process's turn would be posted again only at that process's next restart,
// maybe days later.
const relaxedConns = 4

// defaultQueryConns is the least size of the query pool when database.url sets no pool_max_conns.
const defaultQueryConns = 8

func (s *pgStore) clock() time.Time { return dbTime(s.now()) }

func (s *pgStore) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("db: ping: %w", err)
	}
	return nil
}

// Migrate holds an advisory lock while goose runs, so replicas starting together migrate one at a
// time and the later ones find nothing to do. The lock key includes the namespace, so schemas in one
// database migrate independently.
func (s *pgStore) Migrate(ctx context.Context) error {
	unlock, err := s.advisoryLock(ctx, lockKey(s.ns, lockKindMigrate, ""))
	if err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	defer unlock()
	return s.withMigrator(func(p *goose.Provider, sqlDB *sql.DB) error {
		return migrateUp(ctx, p, goose.DialectPostgres, sqlDB)
	})
}

func (s *pgStore) CheckSchema(ctx context.Context) error {
	return s.withMigrator(func(p *goose.Provider, sqlDB *sql.DB) error {
		return checkSchema(ctx, p, goose.DialectPostgres, sqlDB)
	})
}

func (s *pgStore) SchemaVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.withMigrator(func(p *goose.Provider, _ *sql.DB) (err error) {
		v, err = schemaVersion(ctx, p)
		return err
	})
	return v, err
}

func (s *pgStore) withMigrator(fn func(*goose.Provider, *sql.DB) error) error {
	// Closing this *sql.DB leaves the pool open.
	sqlDB := stdlib.OpenDBFromPool(s.pool)
	defer sqlDB.Close()
	p, err := newMigrator(goose.DialectPostgres, "migrations/postgres", sqlDB)
	if err != nil {
		return err
	}
	return fn(p, sqlDB)
}

// Close releases held locks and leadership first: pgxpool.Close waits for every acquired connection.
func (s *pgStore) Close() error {
	s.markClose()
	s.mu.Lock()
	holds := make([]*pgHold, 0, len(s.holds))
	for h := range s.holds {
		holds = append(holds, h)
	}
	s.mu.Unlock()
	for _, h := range holds {
		h.release()
	}
	s.closePools()
	return nil
}

func (s *pgStore) closePools() {
	s.relaxedPool.Close()
	s.intakePool.Close()
	s.lockPool.Close()
	s.pool.Close()
}

// pgErr maps driver errors to the store's: no rows becomes ErrNotFound. what names the operation.
func pgErr(what string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("db: %s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("db: %s: %w", what, err)
}
