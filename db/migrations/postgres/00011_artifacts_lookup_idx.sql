-- +goose Up
-- An artifact's path is a file name the agent chose, up to PATH_MAX (4096 bytes), but a btree entry
-- holds at most 2704 bytes: recording a file with a long, incompressible path failed on PostgreSQL
-- ("index row size exceeds btree maximum"; SQLite has no such limit), so it was offered again on
-- every turn. The lookup now finds the thread's uploads of that content (a handful) by index, newest
-- first, and compares their paths; the path is no longer in the index.
CREATE INDEX artifacts_content_idx ON artifacts (thread_key, sha256, id);
DROP INDEX artifacts_lookup_idx;

-- +goose Down
CREATE INDEX artifacts_lookup_idx ON artifacts (thread_key, path, sha256);
DROP INDEX artifacts_content_idx;
