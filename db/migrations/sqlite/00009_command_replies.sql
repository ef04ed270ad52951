-- +goose Up
-- command_replies: see the Postgres migration of the same number.
CREATE TABLE command_replies (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    platform_event_id TEXT NOT NULL UNIQUE,
    thread_key        TEXT NOT NULL,
    user_id           TEXT NOT NULL,
    command           TEXT NOT NULL,
    private           BOOLEAN NOT NULL DEFAULT 0,
    delivery          TEXT NOT NULL CHECK (json_valid(delivery)),
    owner             TEXT NOT NULL,
    answer            TEXT,
    attempts          INTEGER NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL
);

-- +goose Down
DROP TABLE command_replies;
