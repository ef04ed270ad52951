package sandboxhttp

import (
	"context"
	"fmt"
	"time"
)

// Backoff of Retry: from tens of milliseconds, doubling, to a second.
const (
	RetryFirstDelay = 25 * time.Millisecond
	RetryMaxDelay   = time.Second
)

// Retry calls try until it succeeds, an error is permanent, ctx ends, or window has passed since the
// first call, backing off from RetryFirstDelay to RetryMaxDelay between calls. try gets a context that
// ends with the window. It returns nil on success, ctx's cause when ctx ended (the caller gave up),
// and otherwise the last error that was not the window's own end.
//
// The runtimes use it to find a run again after its event stream dropped: a tunnel hiccup or a server
// restarting its stream passes in milliseconds to seconds, a sandbox that died does not.
func Retry(ctx context.Context, window time.Duration, permanent func(error) bool, try func(ctx context.Context) error) error {
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	delay := RetryFirstDelay
	var last error
	for {
		err := try(wctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case last == nil || wctx.Err() == nil:
			// An error made by the window ending says less than the one before it.
			last = err
		}
		if permanent(err) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-wctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if wctx.Err() != nil {
			return fmt.Errorf("not within %s: %w", window, last)
		}
		delay = min(2*delay, RetryMaxDelay)
	}
}
