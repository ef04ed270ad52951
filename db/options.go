package db

import "time"

// Option configures Open.
type Option func(*options)

type options struct {
	migrate       bool
	now           func() time.Time
	lockNamespace *string
	lockConns     int32
	warm          bool
	// warmed, if set, is told how many connections the warm pools opened in time, of how many.
	warmed func(opened, wanted int)
}

func defaultOptions() options {
	return options{now: time.Now, lockConns: 32}
}

// WithMigrate makes Open apply pending migrations before it returns. Without it Open leaves the schema
// alone, so `threadbox serve --no-migrate` style setups can migrate separately.
func WithMigrate() Option { return func(o *options) { o.migrate = true } }

// WithClock replaces time.Now for every time the store writes. Tests use it to control time.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLockNamespace sets the string mixed into every Postgres advisory-lock key. The default is the
// connection's current schema, so deployments (and tests) that share a database but not a schema
// do not block each other. SQLite ignores it.
func WithLockNamespace(ns string) Option { return func(o *options) { o.lockNamespace = &ns } }

// WithLockConns sets how many Postgres connections the store may hold for locks (default 32). Each
// held or waiting LockThread and the leader use one; they come from a pool apart from the query
// pool so that lock holders can never starve the queries they go on to run. SQLite ignores it.
func WithLockConns(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.lockConns = int32(n)
		}
	}
}

// WithWarmPools makes Open's pools fixed-size (PostgreSQL; SQLite ignores it): every connection of
// every pool is opened before Open returns (it waits at most warmWait for them) and kept open while
// idle, so a replica has exactly the connections it is budgeted for (README: database.lock_conns), from
// the start. A connection costs its first user a TCP handshake, the server's fork and a SCRAM
// exchange (deliberately slow hashing on both sides), several milliseconds of CPU on each side: a
// replica whose pools grew on demand spent its first burst of events opening them, and their acks
// waited (BenchmarkEventsAck's uncounted first burst: p50 53–73 ms with a quarter of the lock pool
// open ahead, 8–9 ms with all of it), and so again after every quiet spell long enough for idle
// connections to be closed. HikariCP's advice is the same: a fixed-size pool. pool_min_conns in the
// URL still sets the query pool's floor. serve uses it; one-shot commands and tests, which open many
// stores, do not.
//
// report, if not nil, is told how many connections were open when the wait ended, of how many: fewer
// (the server's max_connections reached, or it is slow) is no failure, but the pools are then opened
// again growing on demand and giving idle connections back (shortIdle): fixed-size pools would keep
// what they got, and a pool that got none would have none for good. The operator should hear of it.
func WithWarmPools(report func(opened, wanted int)) Option {
	return func(o *options) { o.warm, o.warmed = true, report }
}
