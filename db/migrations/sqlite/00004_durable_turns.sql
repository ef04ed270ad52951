-- +goose Up
-- Durable turns: see the Postgres migration of the same number.
ALTER TABLE turns ADD COLUMN delivery TEXT CHECK (delivery IS NULL OR json_valid(delivery));
ALTER TABLE turns ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX turns_pending_idx ON turns (id) WHERE status IN ('queued', 'running');

-- +goose Down
DROP INDEX turns_pending_idx;
ALTER TABLE turns DROP COLUMN owner;
ALTER TABLE turns DROP COLUMN delivery;
