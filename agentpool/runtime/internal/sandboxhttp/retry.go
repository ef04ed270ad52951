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

// Pacer spaces out the resubscriptions of one run whose event stream keeps dropping before it brings
// anything (a server, tunnel or proxy that accepts each subscription and closes it at once). Each
// resubscription is a Retry of its own, whose backoff starts anew, so without a Pacer such a stream
// is asked for again in a tight loop for as long as the turn lasts. The zero value is ready: the
// first Wait does not wait, and each later one waits twice as long as the one before (from
// RetryFirstDelay to RetryMaxDelay), until Reset.
type Pacer struct {
	next time.Duration
}

// Wait waits before a resubscription, or until ctx ends (its cause is returned).
func (p *Pacer) Wait(ctx context.Context) error {
	d := p.next
	p.next = min(max(2*d, RetryFirstDelay), RetryMaxDelay)
	if d == 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Reset notes that the stream brought something: the next drop is followed again at once.
func (p *Pacer) Reset() { p.next = 0 }
