-- +goose Up
-- thread_repos: the repository a thread works on, when it has one. A thread chooses it with the
-- in-thread "repo" command, or its first checkout pins the channel's default (so a later change of
-- repos.default does not move a thread under its own work). The pushed_* columns are where the
-- thread's branch was last pushed, for status and the ops view.
CREATE TABLE thread_repos (
    thread_key    text PRIMARY KEY,
    repo          text NOT NULL,
    base_branch   text NOT NULL DEFAULT '',
    work_branch   text NOT NULL DEFAULT '',
    pushed_commit text NOT NULL DEFAULT '',
    pushed_at     timestamptz,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

-- +goose Down
DROP TABLE thread_repos;
