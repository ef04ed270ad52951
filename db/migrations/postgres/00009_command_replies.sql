-- +goose Up
-- command_replies: a command (help, status, stop, reset, use, admin …) taken from a chat platform, from
-- before its ack until its reply is posted. Acknowledged means answered, for commands as for turns: a
-- process that dies in between leaves the row, and a live process posts the recorded answer, or says
-- the command was interrupted (never runs it again: reset and admin commands have effects). A row is
-- deleted once its reply is posted, so the table holds only the commands in flight.
CREATE TABLE command_replies (
    id                bigserial PRIMARY KEY,
    platform_event_id text NOT NULL UNIQUE,
    thread_key        text NOT NULL,
    user_id           text NOT NULL,
    command           text NOT NULL,
    -- private: the answer goes only to user_id (admin replies), never into the thread.
    private           boolean NOT NULL DEFAULT false,
    delivery          jsonb NOT NULL,
    owner             text NOT NULL,
    -- answer is NULL until the command has answered.
    answer            text,
    -- attempts counts the posts that failed (the row is given up after a few).
    attempts          integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL
);

-- +goose Down
DROP TABLE command_replies;
