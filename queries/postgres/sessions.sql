-- name: SessionGetByThread :one
SELECT * FROM sessions WHERE thread_key = @thread_key;

-- SessionInsert creates the row only if the thread has none; RETURNING yields no row when it existed.
-- name: SessionInsert :one
INSERT INTO sessions (
    thread_key, platform, channel_id, owner_user_id, provider, runtime, status,
    last_activity_at, created_at, updated_at
) VALUES (
    @thread_key, @platform, @channel_id, @owner_user_id, @provider, @runtime, @status,
    @now::timestamptz, @now::timestamptz, @now::timestamptz
)
ON CONFLICT (thread_key) DO NOTHING
RETURNING *;

-- SessionTransition is the compare-and-set on status: it changes the row only if its status is one of
-- from_statuses. In SET, "status" still names the old value. NULL patch arguments keep the column.
-- name: SessionTransition :one
UPDATE sessions SET
    status            = @to_status::text,
    handle            = COALESCE(sqlc.narg('handle')::jsonb, handle),
    provider          = COALESCE(sqlc.narg('provider')::text, provider),
    runtime           = COALESCE(sqlc.narg('runtime')::text, runtime),
    sandbox_id        = COALESCE(sqlc.narg('sandbox_id')::text, sandbox_id),
    generation        = CASE WHEN @bump_generation::boolean THEN generation + 1
                             ELSE COALESCE(sqlc.narg('generation')::bigint, generation) END,
    agent_session_id  = COALESCE(sqlc.narg('agent_session_id')::text, agent_session_id),
    last_error        = COALESCE(sqlc.narg('last_error')::text, last_error),
    handoff_note      = COALESCE(sqlc.narg('handoff_note')::text, handoff_note),
    reset_turn_id     = COALESCE(sqlc.narg('reset_turn_id')::bigint, reset_turn_id),
    last_health_ok_at = COALESCE(sqlc.narg('last_health_ok_at')::timestamptz, last_health_ok_at),
    resume_fail_count = CASE @resume_fail::text WHEN 'increment' THEN resume_fail_count + 1
                                                WHEN 'reset' THEN 0
                                                ELSE resume_fail_count END,
    paused_at         = CASE WHEN @to_status::text = 'paused' THEN @now::timestamptz ELSE paused_at END,
    resumed_at        = CASE WHEN @to_status::text = 'active' AND status = 'resuming' THEN @now::timestamptz
                             ELSE resumed_at END,
    destroyed_at      = CASE WHEN @to_status::text = 'destroyed' THEN @now::timestamptz ELSE destroyed_at END,
    last_activity_at  = CASE WHEN @to_status::text = 'active' THEN @now::timestamptz ELSE last_activity_at END,
    updated_at        = @now::timestamptz
WHERE thread_key = @thread_key AND status = ANY(@from_statuses::text[])
  AND (NOT @check_generation::boolean OR generation = @if_generation::bigint)
RETURNING *;

-- name: SessionUpdate :one
UPDATE sessions SET
    handle            = COALESCE(sqlc.narg('handle')::jsonb, handle),
    provider          = COALESCE(sqlc.narg('provider')::text, provider),
    runtime           = COALESCE(sqlc.narg('runtime')::text, runtime),
    sandbox_id        = COALESCE(sqlc.narg('sandbox_id')::text, sandbox_id),
    generation        = COALESCE(sqlc.narg('generation')::bigint, generation),
    agent_session_id  = COALESCE(sqlc.narg('agent_session_id')::text, agent_session_id),
    last_error        = COALESCE(sqlc.narg('last_error')::text, last_error),
    handoff_note      = COALESCE(sqlc.narg('handoff_note')::text, handoff_note),
    reset_turn_id     = COALESCE(sqlc.narg('reset_turn_id')::bigint, reset_turn_id),
    last_health_ok_at = COALESCE(sqlc.narg('last_health_ok_at')::timestamptz, last_health_ok_at),
    updated_at        = @now::timestamptz
WHERE thread_key = @thread_key
RETURNING *;

-- GREATEST keeps activity from moving backwards when replicas' clocks disagree.
-- name: SessionTouch :execrows
UPDATE sessions SET
    last_activity_at = GREATEST(last_activity_at, @now::timestamptz),
    handoff_note     = COALESCE(sqlc.narg('handoff_note')::text, handoff_note),
    updated_at       = @now::timestamptz
WHERE thread_key = @thread_key;

-- Thread keys compare and sort in byte order (COLLATE "C"), as on SQLite, whatever collation the
-- database was created with: a linguistic one put "B" after "a".
-- name: SessionListByStatus :many
SELECT * FROM sessions
WHERE status = @status AND thread_key COLLATE "C" > @after_thread_key::text
ORDER BY thread_key COLLATE "C"
LIMIT @max_rows;

-- name: SessionListLive :many
-- The threads whose sandbox is live (it counts against sandbox.max_active), the given thread's first
-- if it is one of them, so that a limit never hides it: admission's one query per turn.
SELECT thread_key FROM sessions
WHERE status IN ('creating', 'active', 'resuming', 'pausing')
ORDER BY thread_key = @thread_key DESC, thread_key COLLATE "C"
LIMIT @max_rows;

-- The loop queries spell their status as a literal so that the planner can use the partial indexes.

-- name: SessionListIdle :many
SELECT * FROM sessions
WHERE status = 'active' AND last_activity_at < @cutoff::timestamptz
ORDER BY last_activity_at
LIMIT @max_rows;

-- name: SessionListPausedExpired :many
SELECT * FROM sessions
WHERE status = 'paused' AND paused_at < @cutoff::timestamptz
ORDER BY paused_at
LIMIT @max_rows;

-- name: SessionListBySandboxIDs :many
SELECT * FROM sessions
WHERE sandbox_id = ANY(@sandbox_ids::text[])
ORDER BY thread_key COLLATE "C";

-- SessionListUnsettled spells its statuses as literals to match sessions_unsettled_idx.
-- name: SessionListUnsettled :many
SELECT * FROM sessions
WHERE status IN ('creating', 'resuming', 'pausing', 'destroying', 'error') AND updated_at < @cutoff::timestamptz
ORDER BY updated_at
LIMIT @max_rows;
