// Package db is Threadbox's persistence: the Store interface, its row types (Session, Turn, Artifact,
// AuditEntry) and errors, and two implementations behind Open:
//
//   - Postgres (postgres://…): production, any number of replicas. pgx pool, sqlc queries.
//   - SQLite (sqlite:<path>): the embedded default, one process. modernc.org/sqlite (pure Go).
//
// Both pass the same conformance suite, db/dbtest. The SQL lives in queries/<engine>/ (one file per
// table, queries named EntityVerb) and the schema in migrations/<engine>/ (goose files, embedded).
// sqlc generates db/internal/pgsqlc and db/internal/sqlitesqlc from them; only this package sees
// those types. All times written are the store's clock (WithClock) in UTC, truncated to microseconds;
// all times read are UTC, and a zero time.Time stands for NULL. PostgreSQL text holds neither NUL nor
// invalid UTF-8, nor jsonb the escape \u0000 or an unpaired surrogate: in free text (prompts,
// answers, errors, notes) and JSON (delivery, usage, handle) both engines store each as U+FFFD,
// and a key holding one is ErrInvalid.
//
// # Errors and retries
//
// Match errors with errors.Is. What each means for a caller deciding whether to retry:
//
//   - ErrNotFound: the row does not exist. Retrying will not help.
//   - ErrDuplicate (TurnInsert): the platform event was already recorded. It is a Slack retry or a
//     Discord replay: acknowledge it and drop it. It is also how a retried insert learns that its
//     first attempt, whose reply was lost, did succeed.
//   - ErrConflict, as a *TransitionError: the row is not in a state the compare-and-set allowed, and
//     nothing changed. Someone else moved it. Re-read and decide again; never repeat the same
//     transition blindly.
//   - ErrInvalid, ErrBadURL: a bug or a configuration mistake. Do not retry.
//   - ErrLocked (Open, SQLite): another process owns the database. Stop; do not retry in a loop.
//   - Anything else is the database or the network failing. The operation may or may not have
//     happened. Reads are safe to retry. So are writes whose repetition is harmless or detected:
//     SessionCreate (create-if-absent), SessionUpdate and SessionTouch (they set values),
//     SessionTransition without BumpGeneration or ResumeFailIncrement (a repeat either succeeds or
//     returns a TransitionError whose Actual is already the target), TurnInsert (see ErrDuplicate),
//     TurnStart and TurnFinish (same as transitions). The rest may apply twice: re-read before
//     retrying a transition with BumpGeneration or ResumeFailIncrement; a repeated AuditAppend or
//     ArtifactRecord adds a second row, which is harmless (lookups return the newest).
//
// # Locks
//
// LockThread serializes work on one thread across processes; TryLeader picks the one process that
// runs the background loops.
//
// On Postgres, TurnInsert is group-committed (pg_intake.go): inserts that arrive while one commits
// go together in the next statement and commit, on two connections of their own, and each caller
// returns once its row is committed. The query pool has at least 8 connections unless the URL sets
// pool_max_conns.
//
// On Postgres, LockThread takes a session-level pg_advisory_lock on a connection of its own, from a
// pool kept apart from the query pool (WithLockConns, default 32), so lock holders can never starve
// the queries they go on to run. The connection is held until unlock. The key is the 64-bit FNV-1a
// hash of namespace NUL "thread" NUL threadKey (see lockKey; the hash must never change), where the
// namespace is the connection's current schema unless WithLockNamespace says otherwise: two
// deployments sharing a database in different schemas do not block each other. The leader lock is
// the same with kind "leader" and an empty name; Migrate takes kind "migrate".
//
// What ends a Postgres lock:
//   - unlock (idempotent) or Leader.Release; Store.Close releases everything still held;
//   - the holding connection dying: process crash, network loss (TCP keepalives on the lock
//     connections detect a dead peer in about a minute), pg_terminate_backend. The server drops
//     the lock and the next waiter gets it. A Leader sees this at once: Lost is closed, because a
//     goroutine is blocked reading the idle connection and wakes when it fails, no polling. A thread
//     lock is not watched: a turn that outlives its lock is caught by the compare-and-set
//     transitions, which is why the resolver changes state only through SessionTransition;
//   - a wait whose context ends: the store also sends the server a cancel request (otherwise the
//     server would keep queueing for the lock) and discards the connection, so a lock granted at that
//     very moment is dropped, not leaked.
//
// On SQLite there is one process: Open takes an exclusive flock on <path>.lock and a second process,
// or a second Open in the same process, fails with ErrLocked ("another threadbox process uses
// <path>"). The kernel drops the flock when the process dies, so a crash leaves nothing stale.
// LockThread is an in-process mutex per key (kept only while held or awaited) and TryLeader always
// succeeds; its Lost is closed by Release or Close.
//
// Rules for callers, on both engines:
//   - Locks are not reentrant. Locking a thread you already hold blocks until ctx ends.
//   - Hold at most one thread lock at a time (or take them in sorted key order).
//   - Take the lock with a context that ends when the work is abandoned; unlock with defer.
//   - A lock is a fast path, not the guarantee: state changes go through compare-and-set.
package db
