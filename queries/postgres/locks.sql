-- Advisory locks (PostgreSQL only; SQLite uses a lock file and in-process mutexes). Session-level locks
-- belong to the connection that took them: the store runs these on a dedicated pooled connection, and the
-- server drops them if that connection dies. Keys come from db.lockKey (FNV-1a, see db/doc.go).

-- name: LockAcquire :exec
SELECT pg_advisory_lock(@key::bigint);

-- name: LockTryAcquire :one
SELECT pg_try_advisory_lock(@key::bigint);

-- name: LockRelease :one
SELECT pg_advisory_unlock(@key::bigint);
