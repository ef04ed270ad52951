-- +goose Up
-- Durable turns: acknowledged means answered.
--   delivery: where the reply goes and the attachments' references, opaque to the store (the bot
--             encodes it), so that any process can answer the turn after the one that took it died;
--   owner:    the process instance that runs (or will run) the turn. Another process claims a turn
--             only when that instance's liveness lock is free.
ALTER TABLE turns ADD COLUMN delivery jsonb;
ALTER TABLE turns ADD COLUMN owner text NOT NULL DEFAULT '';
CREATE INDEX turns_pending_idx ON turns (id) WHERE status IN ('queued', 'running');

-- +goose Down
DROP INDEX turns_pending_idx;
ALTER TABLE turns DROP COLUMN owner;
ALTER TABLE turns DROP COLUMN delivery;
