-- +goose Up
-- reset_turn_id is the newest turn when the thread was reset: the replayed transcript starts after it,
-- so a reset thread really starts fresh while its turns stay on record.
ALTER TABLE sessions ADD COLUMN reset_turn_id INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE sessions DROP COLUMN reset_turn_id;
