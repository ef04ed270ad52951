-- name: ThreadRepoGet :one
SELECT * FROM thread_repos WHERE thread_key = @thread_key;

-- ThreadRepoSet chooses the thread's repository. A different repository starts with nothing pushed;
-- the same one keeps its push record.
-- name: ThreadRepoSet :one
INSERT INTO thread_repos (thread_key, repo, base_branch, work_branch, created_at, updated_at)
VALUES (@thread_key, @repo, @base_branch, @work_branch, @now::timestamptz, @now::timestamptz)
ON CONFLICT (thread_key) DO UPDATE SET
    pushed_commit = CASE WHEN thread_repos.repo = excluded.repo THEN thread_repos.pushed_commit ELSE '' END,
    pushed_at = CASE WHEN thread_repos.repo = excluded.repo THEN thread_repos.pushed_at ELSE NULL END,
    repo = excluded.repo,
    base_branch = excluded.base_branch,
    work_branch = excluded.work_branch,
    updated_at = excluded.updated_at
RETURNING *;

-- ThreadRepoPin records the repository a thread got by default, unless it has one already.
-- name: ThreadRepoPin :one
INSERT INTO thread_repos (thread_key, repo, base_branch, work_branch, created_at, updated_at)
VALUES (@thread_key, @repo, @base_branch, @work_branch, @now::timestamptz, @now::timestamptz)
ON CONFLICT (thread_key) DO NOTHING
RETURNING *;

-- ThreadRepoPushed records a push, only while the thread is still on that repository.
-- name: ThreadRepoPushed :one
UPDATE thread_repos
SET pushed_commit = @pushed_commit, pushed_at = @now::timestamptz, updated_at = @now::timestamptz
WHERE thread_key = @thread_key AND repo = @repo
RETURNING *;

-- name: ThreadRepoListByKeys :many
SELECT * FROM thread_repos
WHERE thread_key = ANY(@thread_keys::text[])
ORDER BY thread_key COLLATE "C";
