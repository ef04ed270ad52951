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

-- TurnListPendingInThread lists a thread's unfinished turns older than before_id that another
-- owner holds, oldest first: what a process taking over the thread answers first.
-- name: TurnListPendingInThread :many
SELECT * FROM turns
WHERE thread_key = @thread_key AND id < @before_id AND status IN ('queued', 'running') AND owner <> @owner
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

-- TurnAddUsage adds one model call's tokens to a turn, atomically and in any status: the model gateway
-- records a call whose last bytes may arrive after the turn was finished.
-- name: TurnAddUsage :execrows
UPDATE turns SET usage = json_set(COALESCE(usage, '{}'),
    '$.input_tokens',  COALESCE(json_extract(usage, '$.input_tokens'), 0) + CAST(@input_tokens AS INTEGER),
    '$.output_tokens', COALESCE(json_extract(usage, '$.output_tokens'), 0) + CAST(@output_tokens AS INTEGER))
WHERE id = @id;

-- name: TurnGetRunning :one
SELECT * FROM turns
WHERE thread_key = @thread_key AND status = 'running'
ORDER BY id DESC
LIMIT 1;

-- TurnUsageTotals sums input plus output tokens: the thread's whole life, the user's turns started
-- since @since, and every turn started since @since.
-- name: TurnUsageTotals :one
SELECT
    CAST((SELECT COALESCE(SUM(COALESCE(json_extract(t.usage, '$.input_tokens'), 0) + COALESCE(json_extract(t.usage, '$.output_tokens'), 0)), 0)
          FROM turns t WHERE t.thread_key = @thread_key) AS INTEGER) AS thread_tokens,
    CAST((SELECT COALESCE(SUM(COALESCE(json_extract(u.usage, '$.input_tokens'), 0) + COALESCE(json_extract(u.usage, '$.output_tokens'), 0)), 0)
          FROM turns u WHERE u.user_id = @user_id AND u.started_at >= @since) AS INTEGER) AS user_tokens,
    CAST((SELECT COALESCE(SUM(COALESCE(json_extract(d.usage, '$.input_tokens'), 0) + COALESCE(json_extract(d.usage, '$.output_tokens'), 0)), 0)
          FROM turns d WHERE d.started_at >= @since) AS INTEGER) AS all_tokens;

-- name: TurnMarkDelivered :execrows
UPDATE turns SET delivered_at = @now WHERE id = @id AND delivered_at IS NULL;

-- TurnListUndelivered pages through finished turns whose outcome was never posted, oldest first.
-- name: TurnListUndelivered :many
SELECT * FROM turns
WHERE delivered_at IS NULL AND status IN ('done', 'failed', 'cancelled') AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- name: TurnClaimUndelivered :one
UPDATE turns SET owner = @to_owner
WHERE id = @id AND owner = @from_owner AND delivered_at IS NULL AND status IN ('done', 'failed', 'cancelled')
RETURNING *;
