-- ON CONFLICT makes the dedupe atomic: of concurrent inserts of one event exactly one returns a row.
-- name: TurnInsert :one
INSERT INTO turns (thread_key, platform_event_id, user_id, prompt, status, created_at, delivery, owner)
VALUES (@thread_key, @platform_event_id, @user_id, @prompt, 'queued', @now::timestamptz, sqlc.narg('delivery')::jsonb, @owner)
ON CONFLICT (platform_event_id) DO NOTHING
RETURNING *;

-- name: TurnInsertHeld :one
-- TurnInsert for a thread idle in this process, on a lock connection: the same statement tries the
-- thread's lock (session-level: it outlives the statement), and when it got it and no unfinished turn
-- of the thread belongs to another process, records the turn started, so that one commit both
-- acknowledges the message and starts its turn (agentpool: startAtIntake). held says whether the lock
-- was taken, whichever status the turn got.
WITH got AS MATERIALIZED (SELECT pg_try_advisory_lock(@lock_key::bigint) AS held),
start AS (
    SELECT got.held AND NOT EXISTS (
        SELECT 1 FROM turns o
        WHERE o.thread_key = @thread_key AND o.status IN ('queued', 'running') AND o.owner <> @owner
    ) AS now_running
    FROM got
)
INSERT INTO turns (thread_key, platform_event_id, user_id, prompt, status, created_at, started_at, last_event_at, delivery, owner)
SELECT @thread_key, @platform_event_id, @user_id, @prompt,
       CASE WHEN start.now_running THEN 'running' ELSE 'queued' END, @now::timestamptz,
       CASE WHEN start.now_running THEN @now::timestamptz END,
       CASE WHEN start.now_running THEN @now::timestamptz END,
       sqlc.narg('delivery')::jsonb, @owner
FROM start
ON CONFLICT (platform_event_id) DO NOTHING
RETURNING turns.*, (SELECT held FROM got) AS held;

-- name: TurnInsertMany :many
-- Group commit (db/pg_intake.go): many turns in one statement, one round trip and one commit. Rows
-- are inserted in the order given; a duplicate event id is skipped, as in TurnInsert. PostgreSQL only:
-- SQLite has a single writer on a local file and gains nothing from it.
INSERT INTO turns (thread_key, platform_event_id, user_id, prompt, status, created_at, delivery, owner)
SELECT t.thread_key, t.platform_event_id, t.user_id, t.prompt, 'queued', t.created_at, t.delivery, t.owner
FROM (
    -- Set-returning functions in one select list advance together, element by element.
    SELECT unnest(@thread_keys::text[]) AS thread_key,
           unnest(@platform_event_ids::text[]) AS platform_event_id,
           unnest(@user_ids::text[]) AS user_id,
           unnest(@prompts::text[]) AS prompt,
           unnest(@created_ats::timestamptz[]) AS created_at,
           unnest(@deliveries::jsonb[]) AS delivery,
           unnest(@owners::text[]) AS owner,
           generate_series(1, cardinality(@owners::text[])) AS ord
) AS t
ORDER BY t.ord
ON CONFLICT (platform_event_id) DO NOTHING
RETURNING *;

-- name: TurnGet :one
SELECT * FROM turns WHERE id = @id;

-- name: TurnGetByEvent :one
SELECT * FROM turns WHERE platform_event_id = @platform_event_id;

-- name: TurnStart :one
UPDATE turns SET status = 'running', started_at = @now::timestamptz, last_event_at = @now::timestamptz
WHERE id = @id AND status = 'queued' AND owner = @owner
RETURNING *;

-- name: TurnStartFirst :one
-- TurnStart, unless an older unfinished turn of the thread belongs to another process (a dead one's
-- to take over, or a live one's to wait for): one statement on every turn's path, where the
-- check (TurnListPendingInThread) and the start were two.
UPDATE turns SET status = 'running', started_at = @now::timestamptz, last_event_at = @now::timestamptz
WHERE turns.id = @id AND turns.status = 'queued' AND turns.owner = @owner
  AND NOT EXISTS (
    SELECT 1 FROM turns o
    WHERE o.thread_key = turns.thread_key AND o.id < turns.id
      AND o.status IN ('queued', 'running') AND o.owner <> @owner
  )
RETURNING *;

-- name: TurnTouch :execrows
UPDATE turns SET last_event_at = GREATEST(last_event_at, @now::timestamptz)
WHERE id = @id AND status = 'running';

-- TurnFinish, fenced to an owner when one is given: a process finishes only a turn it still holds.
-- The runtime's usage adds its keys to what the model gateway counted (TurnAddUsage), whose counts
-- win: the budgets sum them, and the runtime's report comes from inside the sandbox.
-- name: TurnFinish :one
UPDATE turns SET
    status      = @to_status::text,
    answer      = @answer,
    error       = @error,
    usage       = COALESCE(sqlc.narg('usage')::jsonb || usage, sqlc.narg('usage')::jsonb, usage),
    finished_at = @now::timestamptz
WHERE id = @id AND status IN ('queued', 'running')
  AND (@owner::text = '' OR owner = @owner)
RETURNING *;

-- TurnListTranscript returns the newest finished turns first, as many of the newest max_rows as fit in
-- max_chars characters (prompt plus answer) together. A turn longer than max_turn_chars (half of
-- max_chars) is left out, and the older ones still come: one long answer must not leave the replay
-- empty (the session's hand-off note still sums up the newest turn). Only their text is read out: a
-- turn it leaves out can be tens of MB. The store reverses them.
-- name: TurnListTranscript :many
SELECT * FROM turns
WHERE turns.id IN (
    SELECT running.id FROM (
        SELECT newest.id, sum(newest.chars) OVER (ORDER BY newest.id DESC) AS total
        FROM (
            SELECT t.id, length(t.prompt) + length(t.answer) AS chars FROM turns AS t
            WHERE t.thread_key = @thread_key AND t.status IN ('done', 'failed', 'cancelled') AND t.id > @after_id
                AND length(t.prompt) + length(t.answer) <= @max_turn_chars::bigint
            ORDER BY t.id DESC
            LIMIT @max_rows
        ) AS newest
    ) AS running
    WHERE running.total <= @max_chars::bigint
)
ORDER BY turns.id DESC;

-- name: TurnListStuck :many
SELECT * FROM turns
WHERE status = 'running' AND last_event_at < @cutoff::timestamptz
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
  AND created_at <= @cutoff::timestamptz AND id > @after_id
ORDER BY id
LIMIT @max_rows;

-- TurnListRunningOwned pages through one owner's running turns started at or before cutoff, in id
-- order: the adoption pass looks among them for turns its process no longer holds. Filtered here,
-- as TurnListQueuedOwned is. The status IN term matches turns_pending_idx.
-- name: TurnListRunningOwned :many
SELECT * FROM turns
WHERE status IN ('queued', 'running') AND status = 'running' AND owner = @owner
  AND started_at <= @cutoff::timestamptz AND id > @after_id
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
WHERE id = @id AND owner = @from_owner AND status IN ('queued', 'running') AND status = @status::text
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
UPDATE turns SET usage = COALESCE(usage, '{}'::jsonb) || jsonb_build_object(
    'input_tokens',  COALESCE((usage->>'input_tokens')::bigint, 0) + @input_tokens::bigint,
    'output_tokens', COALESCE((usage->>'output_tokens')::bigint, 0) + @output_tokens::bigint,
    'cost_micros',   COALESCE((usage->>'cost_micros')::bigint, 0) + @cost_micros::bigint)
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
    t.thread_tokens::bigint AS thread_tokens,
    t.thread_today_tokens::bigint AS thread_today_tokens,
    u.user_tokens::bigint AS user_tokens,
    d.all_tokens::bigint AS all_tokens,
    t.thread_cost_micros::bigint AS thread_cost_micros,
    u.user_cost_micros::bigint AS user_cost_micros,
    d.all_cost_micros::bigint AS all_cost_micros
FROM
    (SELECT COALESCE(SUM(COALESCE((a.usage->>'input_tokens')::bigint, 0) + COALESCE((a.usage->>'output_tokens')::bigint, 0)), 0) AS thread_tokens,
            COALESCE(SUM(COALESCE((a.usage->>'input_tokens')::bigint, 0) + COALESCE((a.usage->>'output_tokens')::bigint, 0)) FILTER (WHERE a.started_at >= @since::timestamptz), 0) AS thread_today_tokens,
            COALESCE(SUM(COALESCE((a.usage->>'cost_micros')::bigint, 0)), 0) AS thread_cost_micros
     FROM turns a WHERE a.thread_key = @thread_key::text) t,
    (SELECT COALESCE(SUM(COALESCE((b.usage->>'input_tokens')::bigint, 0) + COALESCE((b.usage->>'output_tokens')::bigint, 0)), 0) AS user_tokens,
            COALESCE(SUM(COALESCE((b.usage->>'cost_micros')::bigint, 0)), 0) AS user_cost_micros
     FROM turns b WHERE b.user_id = @user_id::text AND b.started_at >= @since::timestamptz) u,
    (SELECT COALESCE(SUM(COALESCE((c.usage->>'input_tokens')::bigint, 0) + COALESCE((c.usage->>'output_tokens')::bigint, 0)), 0) AS all_tokens,
            COALESCE(SUM(COALESCE((c.usage->>'cost_micros')::bigint, 0)), 0) AS all_cost_micros
     FROM turns c WHERE c.started_at >= @since::timestamptz) d;

-- TurnUsageTopThreads ranks threads by the tokens of their turns started since @since.
-- name: TurnUsageTopThreads :many
SELECT thread_key AS name,
    SUM(COALESCE((turns.usage->>'input_tokens')::bigint, 0) + COALESCE((turns.usage->>'output_tokens')::bigint, 0))::bigint AS tokens,
    SUM(COALESCE((turns.usage->>'cost_micros')::bigint, 0))::bigint AS cost_micros
FROM turns WHERE started_at >= @since::timestamptz AND usage IS NOT NULL
GROUP BY thread_key
ORDER BY tokens DESC, thread_key COLLATE "C"
LIMIT @max_rows;

-- TurnUsageTopUsers ranks users by the tokens of their turns started since @since. A user is named as
-- admin.users names them, platform:user_id (the platform is the thread key's first part).
-- name: TurnUsageTopUsers :many
SELECT CAST(substr(thread_key, 1, strpos(thread_key, ':')) || user_id AS TEXT) AS name,
    SUM(COALESCE((turns.usage->>'input_tokens')::bigint, 0) + COALESCE((turns.usage->>'output_tokens')::bigint, 0))::bigint AS tokens,
    SUM(COALESCE((turns.usage->>'cost_micros')::bigint, 0))::bigint AS cost_micros
FROM turns WHERE started_at >= @since::timestamptz AND usage IS NOT NULL
GROUP BY substr(thread_key, 1, strpos(thread_key, ':')) || user_id
ORDER BY tokens DESC, (substr(thread_key, 1, strpos(thread_key, ':')) || user_id) COLLATE "C"
LIMIT @max_rows;

-- name: TurnMarkDelivered :execrows
UPDATE turns SET delivered_at = @now::timestamptz WHERE id = @id AND delivered_at IS NULL;

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
