-- ArtifactInsert copies thread_key from the turn, so a missing turn inserts nothing (no row returned).
-- name: ArtifactInsert :one
INSERT INTO artifacts (turn_id, thread_key, path, sha256, size, uploaded_at, platform_file_id)
SELECT t.id, t.thread_key, @path, @sha256, @size, @now::timestamptz, @platform_file_id
FROM turns t WHERE t.id = @turn_id
RETURNING *;

-- name: ArtifactGetByPathSHA :one
SELECT * FROM artifacts
WHERE thread_key = @thread_key AND path = @path AND sha256 = @sha256
ORDER BY id DESC
LIMIT 1;
