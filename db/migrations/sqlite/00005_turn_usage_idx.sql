-- +goose Up
-- The model gateway sums a user's and the whole deployment's usage since midnight before each call.
CREATE INDEX turns_user_started_idx ON turns (user_id, started_at);
CREATE INDEX turns_started_idx ON turns (started_at);

-- +goose Down
DROP INDEX turns_started_idx;
DROP INDEX turns_user_started_idx;
