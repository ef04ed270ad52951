-- +goose Up
-- delivered_at: see the Postgres migration of the same number.
ALTER TABLE turns ADD COLUMN delivered_at TEXT;
UPDATE turns SET delivered_at = finished_at WHERE status IN ('done', 'failed', 'cancelled');
CREATE INDEX turns_undelivered_idx ON turns (id) WHERE delivered_at IS NULL AND status IN ('done', 'failed', 'cancelled');

-- +goose Down
DROP INDEX turns_undelivered_idx;
ALTER TABLE turns DROP COLUMN delivered_at;
