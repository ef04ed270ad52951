-- CommandInsert records a command before its ack; a second delivery of its event records nothing.
-- name: CommandInsert :one
INSERT INTO command_replies (platform_event_id, thread_key, user_id, command, private, delivery, owner, created_at)
VALUES (@platform_event_id, @thread_key, @user_id, @command, @private, @delivery, @owner, @now::timestamptz)
ON CONFLICT (platform_event_id) DO NOTHING
RETURNING *;

-- CommandAnswer records a command's answer, once.
-- name: CommandAnswer :execrows
UPDATE command_replies SET answer = @answer WHERE id = @id AND answer IS NULL;

-- CommandPostFailed counts a failed post of the command's reply.
-- name: CommandPostFailed :one
UPDATE command_replies SET attempts = attempts + 1 WHERE id = @id RETURNING attempts;

-- name: CommandDelete :exec
DELETE FROM command_replies WHERE id = @id;

-- CommandsOpen pages through the commands whose reply is not posted yet, in id order.
-- name: CommandsOpen :many
SELECT * FROM command_replies WHERE id > @after_id ORDER BY id LIMIT @lim;

-- CommandClaim makes to the owner of a command if from still owns it.
-- name: CommandClaim :one
UPDATE command_replies SET owner = @to_owner WHERE id = @id AND owner = @from_owner RETURNING *;
