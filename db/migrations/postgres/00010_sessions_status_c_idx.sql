-- +goose Up
-- SessionsByStatus pages by thread key in byte order (COLLATE "C", as on SQLite and as its callers'
-- cursors compare), but sessions_status_idx was built with the column's default collation, which a
-- COLLATE "C" range and ORDER BY cannot use: every page read and sorted all the sessions in that
-- status (destroyed ones pile up for ever). This index reads a page in order and stops at the limit;
-- it serves the status-only lookups too, so it replaces the old one.
CREATE INDEX sessions_status_c_idx ON sessions (status, thread_key COLLATE "C");
DROP INDEX sessions_status_idx;

-- +goose Down
CREATE INDEX sessions_status_idx ON sessions (status, thread_key);
DROP INDEX sessions_status_c_idx;
