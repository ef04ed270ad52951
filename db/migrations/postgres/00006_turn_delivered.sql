-- +goose Up
-- delivered_at: when the turn's outcome was posted to its thread. A turn finished but not delivered
-- (its process died between recording the outcome and posting it) is redelivered by the recovery
-- pass of a live process. Turns finished before this migration count as delivered.
ALTER TABLE turns ADD COLUMN delivered_at timestamptz;
UPDATE turns SET delivered_at = finished_at WHERE status IN ('done', 'failed', 'cancelled');
CREATE INDEX turns_undelivered_idx ON turns (id) WHERE delivered_at IS NULL AND status IN ('done', 'failed', 'cancelled');

-- +goose Down
DROP INDEX turns_undelivered_idx;
ALTER TABLE turns DROP COLUMN delivered_at;
