-- +goose Up
-- thread_repos: see the Postgres migration of the same number.
CREATE TABLE thread_repos (
    thread_key    TEXT PRIMARY KEY,
    repo          TEXT NOT NULL,
    base_branch   TEXT NOT NULL DEFAULT '',
    work_branch   TEXT NOT NULL DEFAULT '',
    pushed_commit TEXT NOT NULL DEFAULT '',
    pushed_at     TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);

-- +goose Down
DROP TABLE thread_repos;
