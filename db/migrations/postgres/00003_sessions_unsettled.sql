-- +goose Up
-- The reconcile loop asks for sessions stuck between two stable states (a crash or a failed call left
-- them creating, resuming, pausing, destroying or in error) and not changed for a grace period, oldest
-- first. Like the other loop indexes it is partial: stable rows (active, paused, destroyed), the vast
-- majority, are not in it.
CREATE INDEX sessions_unsettled_idx ON sessions (updated_at)
    WHERE status IN ('creating', 'resuming', 'pausing', 'destroying', 'error');

-- +goose Down
DROP INDEX sessions_unsettled_idx;
