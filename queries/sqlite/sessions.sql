-- name: SessionGetByThread :one
SELECT * FROM sessions WHERE thread_key = @thread_key;

-- SessionInsert creates the row only if the thread has none; RETURNING yields no row when it existed.
-- name: SessionInsert :one
INSERT INTO sessions (
    thread_key, platform, channel_id, owner_user_id, provider, runtime, status,
    last_activity_at, created_at, updated_at
) VALUES (
    @thread_key, @platform, @channel_id, @owner_user_id, @provider, @runtime, @status,
    @now, @now, @now
)
ON CONFLICT (thread_key) DO NOTHING
RETURNING *;

-- SessionTransition is the compare-and-set on status: it changes the row only if its status is one of
-- from_statuses. In SET, "status" still names the old value. NULL patch arguments keep the column.
-- name: SessionTransition :one
UPDATE sessions SET
    status            = @to_status,
    handle            = COALESCE(sqlc.narg('handle'), handle),
    provider          = COALESCE(sqlc.narg('provider'), provider),
    runtime           = COALESCE(sqlc.narg('runtime'), runtime),
    sandbox_id        = COALESCE(sqlc.narg('sandbox_id'), sandbox_id),
    generation        = CASE WHEN CAST(@bump_generation AS INTEGER) != 0 THEN generation + 1
                             ELSE COALESCE(sqlc.narg('generation'), generation) END,
    agent_session_id  = COALESCE(sqlc.narg('agent_session_id'), agent_session_id),
    last_error        = COALESCE(sqlc.narg('last_error'), last_error),
    handoff_note      = COALESCE(sqlc.narg('handoff_note'), handoff_note),
    reset_turn_id     = COALESCE(sqlc.narg('reset_turn_id'), reset_turn_id),
    last_health_ok_at = COALESCE(sqlc.narg('last_health_ok_at'), last_health_ok_at),
    resume_fail_count = CASE CAST(@resume_fail AS TEXT) WHEN 'increment' THEN resume_fail_count + 1
                                                      WHEN 'reset' THEN 0
                                                      ELSE resume_fail_count END,
    paused_at         = CASE WHEN @to_status = 'paused' THEN @now ELSE paused_at END,
    resumed_at        = CASE WHEN @to_status = 'active' AND status = 'resuming' THEN @now ELSE resumed_at END,
    destroyed_at      = CASE WHEN @to_status = 'destroyed' THEN @now ELSE destroyed_at END,
    last_activity_at  = CASE WHEN @to_status = 'active' THEN @now ELSE last_activity_at END,
    updated_at        = @now
-- The generation fence comes before the slice: sqlc numbers parameters (?N), and a bare ? expanded
-- from the slice would shift every number after it.
WHERE thread_key = @thread_key
  AND (CAST(@check_generation AS INTEGER) = 0 OR generation = CAST(@if_generation AS INTEGER))
  AND status IN (sqlc.slice('from_statuses'))
RETURNING *;

-- name: SessionUpdate :one
UPDATE sessions SET
    handle            = COALESCE(sqlc.narg('handle'), handle),
    provider          = COALESCE(sqlc.narg('provider'), provider),
    runtime           = COALESCE(sqlc.narg('runtime'), runtime),
    sandbox_id        = COALESCE(sqlc.narg('sandbox_id'), sandbox_id),
    generation        = COALESCE(sqlc.narg('generation'), generation),
    agent_session_id  = COALESCE(sqlc.narg('agent_session_id'), agent_session_id),
    last_error        = COALESCE(sqlc.narg('last_error'), last_error),
    handoff_note      = COALESCE(sqlc.narg('handoff_note'), handoff_note),
    reset_turn_id     = COALESCE(sqlc.narg('reset_turn_id'), reset_turn_id),
    last_health_ok_at = COALESCE(sqlc.narg('last_health_ok_at'), last_health_ok_at),
    updated_at        = @now
WHERE thread_key = @thread_key
RETURNING *;

-- max() keeps activity from moving backwards.
-- name: SessionTouch :execrows
UPDATE sessions SET
    last_activity_at = max(last_activity_at, @now),
    handoff_note     = COALESCE(sqlc.narg('handoff_note'), handoff_note),
    updated_at       = @now
WHERE thread_key = @thread_key;

-- name: SessionListByStatus :many
SELECT * FROM sessions
WHERE status = @status AND thread_key > @after_thread_key
ORDER BY thread_key
LIMIT @max_rows;

-- name: SessionListLive :many
-- The threads whose sandbox is live (it counts against sandbox.max_active), the given thread's first
-- if it is one of them, so that a limit never hides it: admission's one query per turn.
SELECT thread_key, CAST(thread_key = @thread_key AS INTEGER) AS own FROM sessions
WHERE status IN ('creating', 'active', 'resuming', 'pausing')
ORDER BY own DESC, thread_key
LIMIT @max_rows;

-- The loop queries spell their status as a literal so that the planner can use the partial indexes.

-- name: SessionListIdle :many
SELECT * FROM sessions
WHERE status = 'active' AND last_activity_at < @cutoff
ORDER BY last_activity_at
LIMIT @max_rows;

-- name: SessionListPausedExpired :many
SELECT * FROM sessions
WHERE status = 'paused' AND paused_at < @cutoff
ORDER BY paused_at
LIMIT @max_rows;

-- name: SessionListBySandboxIDs :many
SELECT * FROM sessions
WHERE sandbox_id IN (sqlc.slice('sandbox_ids'))
ORDER BY thread_key;

-- SessionListUnsettled spells its statuses as literals to match sessions_unsettled_idx.
-- name: SessionListUnsettled :many
SELECT * FROM sessions
WHERE status IN ('creating', 'resuming', 'pausing', 'destroying', 'error') AND updated_at < @cutoff
ORDER BY updated_at
LIMIT @max_rows;
