-- Threadbox schema, SQLite flavour. It mirrors db/migrations/postgres; keep the two in step.
-- Times are TEXT in one fixed-width UTC layout (2006-01-02T15:04:05.000000Z, written by the store), so
-- comparing them as strings orders them in time and the indexes below serve the range queries.
-- JSON columns are TEXT checked with json_valid.

-- +goose Up
CREATE TABLE sessions (
    thread_key        TEXT    NOT NULL PRIMARY KEY,
    platform          TEXT    NOT NULL DEFAULT '',
    channel_id        TEXT    NOT NULL DEFAULT '',
    owner_user_id     TEXT    NOT NULL DEFAULT '',
    provider          TEXT    NOT NULL DEFAULT '',
    handle            TEXT CHECK (handle IS NULL OR json_valid(handle)),
    sandbox_id        TEXT    NOT NULL DEFAULT '',
    generation        INTEGER NOT NULL DEFAULT 0,
    runtime           TEXT    NOT NULL DEFAULT '',
    agent_session_id  TEXT    NOT NULL DEFAULT '',
    status            TEXT    NOT NULL CHECK (status IN
        ('creating', 'active', 'pausing', 'paused', 'resuming', 'destroying', 'destroyed', 'error')),
    resume_fail_count INTEGER NOT NULL DEFAULT 0,
    last_error        TEXT    NOT NULL DEFAULT '',
    handoff_note      TEXT    NOT NULL DEFAULT '',
    last_activity_at  TEXT    NOT NULL,
    last_health_ok_at TEXT,
    paused_at         TEXT,
    resumed_at        TEXT,
    destroyed_at      TEXT,
    created_at        TEXT    NOT NULL,
    updated_at        TEXT    NOT NULL
) STRICT;

CREATE INDEX sessions_idle_idx ON sessions (last_activity_at) WHERE status = 'active';
CREATE INDEX sessions_paused_idx ON sessions (paused_at) WHERE status = 'paused';
CREATE INDEX sessions_sandbox_idx ON sessions (sandbox_id);
CREATE INDEX sessions_status_idx ON sessions (status, thread_key);

CREATE TABLE turns (
    id                INTEGER NOT NULL PRIMARY KEY,
    thread_key        TEXT    NOT NULL,
    platform_event_id TEXT    NOT NULL UNIQUE,
    user_id           TEXT    NOT NULL DEFAULT '',
    prompt            TEXT    NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    answer            TEXT    NOT NULL DEFAULT '',
    error             TEXT    NOT NULL DEFAULT '',
    usage             TEXT CHECK (usage IS NULL OR json_valid(usage)),
    created_at        TEXT    NOT NULL,
    started_at        TEXT,
    last_event_at     TEXT,
    finished_at       TEXT
) STRICT;

CREATE INDEX turns_thread_idx ON turns (thread_key, id);
CREATE INDEX turns_running_idx ON turns (last_event_at) WHERE status = 'running';

CREATE TABLE artifacts (
    id               INTEGER NOT NULL PRIMARY KEY,
    turn_id          INTEGER NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    thread_key       TEXT    NOT NULL,
    path             TEXT    NOT NULL,
    sha256           TEXT    NOT NULL,
    size             INTEGER NOT NULL,
    uploaded_at      TEXT    NOT NULL,
    platform_file_id TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX artifacts_lookup_idx ON artifacts (thread_key, path, sha256);
CREATE INDEX artifacts_turn_idx ON artifacts (turn_id);

CREATE TABLE audit_log (
    id     INTEGER NOT NULL PRIMARY KEY,
    at     TEXT    NOT NULL,
    actor  TEXT    NOT NULL,
    action TEXT    NOT NULL,
    target TEXT    NOT NULL DEFAULT '',
    result TEXT    NOT NULL DEFAULT ''
) STRICT;

-- +goose Down
DROP TABLE audit_log;
DROP TABLE artifacts;
DROP TABLE turns;
DROP TABLE sessions;
