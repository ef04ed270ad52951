-- Threadbox schema, PostgreSQL flavour. db/migrations/sqlite mirrors it; keep the two in step.
-- Times are timestamptz and always written in UTC by the store.

-- +goose Up
CREATE TABLE sessions (
    thread_key        text PRIMARY KEY,
    platform          text        NOT NULL DEFAULT '',
    channel_id        text        NOT NULL DEFAULT '',
    owner_user_id     text        NOT NULL DEFAULT '',
    provider          text        NOT NULL DEFAULT '',
    -- handle is the provider's saveable handle, opaque to the store.
    handle            jsonb,
    -- sandbox_id duplicates the handle's id so the reaper can look sessions up by index.
    sandbox_id        text        NOT NULL DEFAULT '',
    generation        bigint      NOT NULL DEFAULT 0,
    runtime           text        NOT NULL DEFAULT '',
    agent_session_id  text        NOT NULL DEFAULT '',
    status            text        NOT NULL CHECK (status IN
        ('creating', 'active', 'pausing', 'paused', 'resuming', 'destroying', 'destroyed', 'error')),
    resume_fail_count integer     NOT NULL DEFAULT 0,
    last_error        text        NOT NULL DEFAULT '',
    handoff_note      text        NOT NULL DEFAULT '',
    last_activity_at  timestamptz NOT NULL,
    last_health_ok_at timestamptz,
    paused_at         timestamptz,
    resumed_at        timestamptz,
    destroyed_at      timestamptz,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);

-- Partial indexes: the loops only ever ask for one status each, so indexing just those rows keeps the
-- indexes small on a table where most rows are destroyed or paused.
CREATE INDEX sessions_idle_idx ON sessions (last_activity_at) WHERE status = 'active';
CREATE INDEX sessions_paused_idx ON sessions (paused_at) WHERE status = 'paused';
CREATE INDEX sessions_sandbox_idx ON sessions (sandbox_id);
CREATE INDEX sessions_status_idx ON sessions (status, thread_key);

-- turns has no foreign key to sessions: intake records (and dedupes) a turn before the resolver has
-- created the thread's session row.
CREATE TABLE turns (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_key        text        NOT NULL,
    platform_event_id text        NOT NULL UNIQUE,
    user_id           text        NOT NULL DEFAULT '',
    prompt            text        NOT NULL,
    status            text        NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    answer            text        NOT NULL DEFAULT '',
    error             text        NOT NULL DEFAULT '',
    usage             jsonb,
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,
    last_event_at     timestamptz,
    finished_at       timestamptz
);

CREATE INDEX turns_thread_idx ON turns (thread_key, id);
CREATE INDEX turns_running_idx ON turns (last_event_at) WHERE status = 'running';

CREATE TABLE artifacts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    turn_id          bigint      NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    thread_key       text        NOT NULL,
    path             text        NOT NULL,
    sha256           text        NOT NULL,
    size             bigint      NOT NULL,
    uploaded_at      timestamptz NOT NULL,
    platform_file_id text        NOT NULL DEFAULT ''
);

CREATE INDEX artifacts_lookup_idx ON artifacts (thread_key, path, sha256);
CREATE INDEX artifacts_turn_idx ON artifacts (turn_id);

CREATE TABLE audit_log (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL,
    actor  text        NOT NULL,
    action text        NOT NULL,
    target text        NOT NULL DEFAULT '',
    result text        NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE audit_log;
DROP TABLE artifacts;
DROP TABLE turns;
DROP TABLE sessions;
