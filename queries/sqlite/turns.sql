-- ON CONFLICT makes the dedupe atomic: of concurrent inserts of one event exactly one returns a row.
-- name: TurnInsert :one
INSERT INTO turns (thread_key, platform_event_id, user_id, prompt, status, created_at, delivery, owner)
VALUES (@thread_key, @platform_event_id, @user_id, @prompt, 'queued', @now, sqlc.narg('delivery'), @owner)
ON CONFLICT (platform_event_id) DO NOTHING
RETURNING *;

-- name: TurnGet :one
SELECT * FROM turns WHERE id = @id;

-- name: TurnStart :one
UPDATE turns SET status = 'running', started_at = @now, last_event_at = @now
WHERE id = @id AND status = 'queued' AND owner = @owner
RETURNING *;

-- name: TurnTouch :execrows
UPDATE turns SET last_event_at = max(last_event_at, CAST(@now AS TEXT))
WHERE id = @id AND status = 'running';

-- name: TurnFinish :one
UPDATE turns SET
    status      = @to_status,
    answer      = @answer,
    error       = @error,
    usage       = COALESCE(sqlc.narg('usage'), usage),
    finished_at = @now
WHERE id = @id AND status IN ('queued', 'running')
RETURNING *;

-- TurnListTranscript returns the newest finished turns first; the store trims by characters and reverses.
-- name: TurnListTranscript :many
SELECT * FROM turns
WHERE thread_key = @thread_key AND status IN ('done', 'failed', 'cancelled') AND id > @after_id
ORDER BY id DESC
LIMIT @max_rows;

-- name: TurnListStuck :many
SELECT * FROM turns
WHERE status = 'running' AND last_event_at < @cutoff
ORDER BY last_event_at
LIMIT @max_rows;

-- TurnListPending pages through turns that are not finished, oldest first: recovery's input.
-- name: TurnListPending :many
SELECT * FROM turns
WHERE status IN ('queued', 'running') AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- TurnClaim moves an unfinished turn from a dead owner to a live one, by compare-and-set.
-- name: TurnClaim :one
UPDATE turns SET owner = @to_owner
WHERE id = @id AND owner = @from_owner AND status IN ('queued', 'running')
RETURNING *;

-- name: TurnLastFailedWith :one
SELECT * FROM turns
WHERE thread_key = @thread_key AND status = 'failed' AND error = @error
ORDER BY id DESC
LIMIT 1;
