package agentpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// withProvider runs f, and while it fails with sandbox.ErrUnavailable retries it with backoff for up
// to providerWait, calling note once when it starts waiting. A provider that stays away is reported
// with the last error, which still wraps ErrUnavailable.
func (l *lifecycle) withProvider(ctx context.Context, note func(), f func() error) error {
	err := f()
	if !errors.Is(err, sandbox.ErrUnavailable) || l.providerWait <= 0 || ctx.Err() != nil {
		return err
	}
	if note != nil {
		note()
	}
	deadline := time.Now().Add(l.providerWait)
	for delay := providerBackoffMin; errors.Is(err, sandbox.ErrUnavailable); delay = min(2*delay, providerBackoffMax) {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("the sandbox service did not come back within %s: %w", l.providerWait, err)
		}
		if werr := waitCtx(ctx, min(delay, left)); werr != nil {
			return fmt.Errorf("waiting for the sandbox service: %w (last: %w)", werr, err)
		}
		err = f()
	}
	return err
}

// unusableHandle reports whether err says the handle itself cannot be used: undecodable here
// (sandbox.ErrBadHandle), or refused by its provider (sandbox.ErrInvalidSpec: a state written by a
// newer build, after a rollback, or a broken one). A call on a handle carries nothing else, so no
// retry can help; such a session is treated as having no sandbox, and the sandbox, if any, is left to
// the reaper (no live session owns it then). Treated as an error instead, it failed every turn of
// the thread and every pass, and kept the sandbox running for ever.
func unusableHandle(err error) bool {
	return errors.Is(err, sandbox.ErrBadHandle) || errors.Is(err, sandbox.ErrInvalidSpec)
}

// destroyDone reports whether a failed Destroy leaves nothing to wait for: the sandbox is gone, or
// its handle is unusable (the reaper removes it).
func destroyDone(err error) bool {
	return errors.Is(err, sandbox.ErrNotFound) || unusableHandle(err)
}

// waitCtx waits d or until ctx ends.
func waitCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
