-- name: AuditInsert :one
INSERT INTO audit_log (at, actor, action, target, result)
VALUES (@now::timestamptz, @actor, @action, @target, @result)
RETURNING *;

-- name: AuditList :many
SELECT * FROM audit_log
WHERE id < @before_id
ORDER BY id DESC
LIMIT @max_rows;
