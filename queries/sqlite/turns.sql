-- ON CONFLICT makes the dedupe atomic: of concurrent inserts of one event exactly one returns a row.
-- name: TurnInsert :one
INSERT INTO turns (thread_key, platform_event_id, user_id, prompt, status, created_at, delivery, owner)
VALUES (@thread_key, @platform_event_id, @user_id, @prompt, 'queued', @now, sqlc.narg('delivery'), @owner)
ON CONFLICT (platform_event_id) DO NOTHING
RETURNING *;

-- name: TurnGet :one
SELECT * FROM turns WHERE id = @id;

-- name: TurnGetByEvent :one
SELECT * FROM turns WHERE platform_event_id = @platform_event_id;

-- name: TurnStart :one
UPDATE turns SET status = 'running', started_at = @now, last_event_at = @now
WHERE id = @id AND status = 'queued' AND owner = @owner
RETURNING *;

-- name: TurnStartFirst :one
-- See the PostgreSQL query.
UPDATE turns SET status = 'running', started_at = @now, last_event_at = @now
WHERE turns.id = @id AND turns.status = 'queued' AND turns.owner = @owner
  AND NOT EXISTS (
    SELECT 1 FROM turns o
    WHERE o.thread_key = turns.thread_key AND o.id < turns.id
      AND o.status IN ('queued', 'running') AND o.owner <> @owner
  )
RETURNING *;

-- name: TurnTouch :execrows
UPDATE turns SET last_event_at = max(last_event_at, CAST(@now AS TEXT))
WHERE id = @id AND status = 'running';

-- TurnFinish, fenced to an owner when one is given: a process finishes only a turn it still holds.
-- The runtime's usage adds its keys to what the model gateway counted (TurnAddUsage), whose counts
-- win: the budgets sum them, and the runtime's report comes from inside the sandbox.
-- name: TurnFinish :one
UPDATE turns SET
    status      = @to_status,
    answer      = @answer,
    error       = @error,
    usage       = COALESCE(json_patch(sqlc.narg('usage'), usage), sqlc.narg('usage'), usage),
    finished_at = @now
WHERE id = @id AND status IN ('queued', 'running')
  AND (@owner = '' OR owner = @owner)
RETURNING *;

-- TurnListTranscript: see the Postgres query of the same name.
-- name: TurnListTranscript :many
SELECT * FROM turns
WHERE turns.id IN (
    SELECT id FROM (
        SELECT id, sum(chars) OVER (ORDER BY id DESC) AS total
        FROM (
            SELECT t.id, length(t.prompt) + length(t.answer) AS chars FROM turns AS t
            WHERE t.thread_key = @thread_key AND t.status IN ('done', 'failed', 'cancelled') AND t.id > @after_id
                AND length(t.prompt) + length(t.answer) <= CAST(@max_turn_chars AS INTEGER)
            ORDER BY t.id DESC
            LIMIT @max_rows
        )
    )
    WHERE total <= CAST(@max_chars AS INTEGER)
)
ORDER BY turns.id DESC;

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

-- TurnListQueuedOwned pages through one owner's queued turns created at or before cutoff, in id
-- order: the adoption pass's input. Filtered here, not by the caller, so that every replica's pass
-- reads only its own few orphans, not every pending turn of every owner (prompts can be large).
-- The status IN term matches turns_pending_idx.
-- name: TurnListQueuedOwned :many
SELECT * FROM turns
WHERE status IN ('queued', 'running') AND status = 'queued' AND owner = @owner
  AND created_at <= @cutoff AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- TurnListRunningOwned pages through one owner's running turns started at or before cutoff, in id
-- order: the adoption pass looks among them for turns its process no longer holds. Filtered here,
-- as TurnListQueuedOwned is. The status IN term matches turns_pending_idx.
-- name: TurnListRunningOwned :many
SELECT * FROM turns
WHERE status IN ('queued', 'running') AND status = 'running' AND owner = @owner
  AND started_at <= @cutoff AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- TurnListPendingInThread lists a thread's unfinished turns older than before_id that another
-- owner holds, oldest first: what a process taking over the thread answers first.
-- name: TurnListPendingInThread :many
SELECT * FROM turns
WHERE thread_key = @thread_key AND id < @before_id AND status IN ('queued', 'running') AND owner <> @owner
ORDER BY id
LIMIT @max_rows;

-- TurnClaim moves an unfinished turn from a dead owner to a live one, by compare-and-set on the
-- owner and on the status the claimer saw: a queued turn its owner started since is not claimed as
-- queued.
-- name: TurnClaim :one
UPDATE turns SET owner = @to_owner
WHERE id = @id AND owner = @from_owner AND status IN ('queued', 'running') AND status = @status
RETURNING *;

-- name: TurnLastFailedWith :one
SELECT * FROM turns
WHERE thread_key = @thread_key AND status = 'failed' AND error = @error
ORDER BY id DESC
LIMIT 1;

-- TurnAddUsage adds one model call's tokens, and its cost in millionths of the price table's currency,
-- to a turn, atomically and in any status: the model gateway records a call whose last bytes may arrive
-- after the turn was finished.
-- name: TurnAddUsage :execrows
UPDATE turns SET usage = json_set(COALESCE(usage, '{}'),
    '$.input_tokens',  COALESCE(json_extract(usage, '$.input_tokens'), 0) + CAST(@input_tokens AS INTEGER),
    '$.output_tokens', COALESCE(json_extract(usage, '$.output_tokens'), 0) + CAST(@output_tokens AS INTEGER),
    '$.cost_micros',   COALESCE(json_extract(usage, '$.cost_micros'), 0) + CAST(@cost_micros AS INTEGER))
WHERE id = @id;

-- name: TurnGetRunning :one
SELECT * FROM turns
WHERE thread_key = @thread_key AND status = 'running'
ORDER BY id DESC
LIMIT 1;

-- TurnUsageTotals sums input plus output tokens, and the cost: the thread's whole life, the thread's
-- turns started since @since, the user's turns started since @since, and every turn started since @since.
-- One scan per scope: the gateway runs this before every model call.
-- name: TurnUsageTotals :one
SELECT
    CAST(t.thread_tokens AS INTEGER) AS thread_tokens,
    CAST(t.thread_today_tokens AS INTEGER) AS thread_today_tokens,
    CAST(u.user_tokens AS INTEGER) AS user_tokens,
    CAST(d.all_tokens AS INTEGER) AS all_tokens,
    CAST(t.thread_cost_micros AS INTEGER) AS thread_cost_micros,
    CAST(u.user_cost_micros AS INTEGER) AS user_cost_micros,
    CAST(d.all_cost_micros AS INTEGER) AS all_cost_micros
FROM
    (SELECT COALESCE(SUM(COALESCE(json_extract(a.usage, '$.input_tokens'), 0) + COALESCE(json_extract(a.usage, '$.output_tokens'), 0)), 0) AS thread_tokens,
            COALESCE(SUM(CASE WHEN a.started_at >= @since THEN COALESCE(json_extract(a.usage, '$.input_tokens'), 0) + COALESCE(json_extract(a.usage, '$.output_tokens'), 0) END), 0) AS thread_today_tokens,
            COALESCE(SUM(COALESCE(json_extract(a.usage, '$.cost_micros'), 0)), 0) AS thread_cost_micros
     FROM turns a WHERE a.thread_key = @thread_key) AS t,
    (SELECT COALESCE(SUM(COALESCE(json_extract(b.usage, '$.input_tokens'), 0) + COALESCE(json_extract(b.usage, '$.output_tokens'), 0)), 0) AS user_tokens,
            COALESCE(SUM(COALESCE(json_extract(b.usage, '$.cost_micros'), 0)), 0) AS user_cost_micros
     FROM turns b WHERE b.user_id = @user_id AND b.started_at >= @since) AS u,
    (SELECT COALESCE(SUM(COALESCE(json_extract(c.usage, '$.input_tokens'), 0) + COALESCE(json_extract(c.usage, '$.output_tokens'), 0)), 0) AS all_tokens,
            COALESCE(SUM(COALESCE(json_extract(c.usage, '$.cost_micros'), 0)), 0) AS all_cost_micros
     FROM turns c WHERE c.started_at >= @since) AS d;

-- TurnUsageTopThreads ranks threads by the tokens of their turns started since @since.
-- name: TurnUsageTopThreads :many
SELECT thread_key AS name,
    CAST(SUM(COALESCE(json_extract(turns.usage, '$.input_tokens'), 0) + COALESCE(json_extract(turns.usage, '$.output_tokens'), 0)) AS INTEGER) AS tokens,
    CAST(SUM(COALESCE(json_extract(turns.usage, '$.cost_micros'), 0)) AS INTEGER) AS cost_micros
FROM turns WHERE started_at >= @since AND usage IS NOT NULL
GROUP BY thread_key
ORDER BY tokens DESC, name
LIMIT @max_rows;

-- TurnUsageTopUsers ranks users by the tokens of their turns started since @since. A user is named as
-- admin.users names them, platform:user_id (the platform is the thread key's first part).
-- name: TurnUsageTopUsers :many
SELECT CAST(substr(thread_key, 1, instr(thread_key, ':')) || user_id AS TEXT) AS name,
    CAST(SUM(COALESCE(json_extract(turns.usage, '$.input_tokens'), 0) + COALESCE(json_extract(turns.usage, '$.output_tokens'), 0)) AS INTEGER) AS tokens,
    CAST(SUM(COALESCE(json_extract(turns.usage, '$.cost_micros'), 0)) AS INTEGER) AS cost_micros
FROM turns WHERE started_at >= @since AND usage IS NOT NULL
GROUP BY substr(thread_key, 1, instr(thread_key, ':')) || user_id
ORDER BY tokens DESC, name
LIMIT @max_rows;

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
