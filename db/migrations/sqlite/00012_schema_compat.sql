-- +goose Up
-- schema_compat: the oldest binary schema version that may run against this database. Migrations are
-- additive (new tables, columns with defaults, indexes), so a binary rolled back after a newer release
-- migrated the database still runs on it: it warns and goes on. A migration that an older binary
-- cannot run against (it drops or renames what older queries use, or adds a column they must fill)
-- raises min_binary_version to its own version; older binaries then refuse to start.
CREATE TABLE schema_compat (
    id                 integer PRIMARY KEY CHECK (id = 1),
    min_binary_version bigint NOT NULL
);
INSERT INTO schema_compat (id, min_binary_version) VALUES (1, 0);

-- +goose Down
DROP TABLE schema_compat;
