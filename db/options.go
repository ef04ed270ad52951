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

// WithWarmPools makes Open connect ahead of need (PostgreSQL; SQLite ignores it): both intake
// connections, half the query pool, a quarter of the lock pool and one relaxed connection, before
// it returns (waiting at most 10 s for them), and keeps them open while idle. A connection costs its first user a TCP handshake, the server's fork and a
// SCRAM exchange (deliberately slow hashing on both sides), several milliseconds of CPU: a replica
// that met its first burst of events with empty pools spent the first few hundred of them opening
// connections, and their acks waited (BenchmarkEventsAck). serve uses it; one-shot commands and
// tests, which open many stores, do not.
func WithWarmPools() Option { return func(o *options) { o.warm = true } }
