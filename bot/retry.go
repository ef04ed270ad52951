package bot

import (
	"context"
	"errors"
	"time"
)

// RetryPolicy is how a platform adapter retries a chat API call the platform asked it to repeat
// (a rate limit's Retry-After, a resource not ready yet).
type RetryPolicy struct {
	// Attempts caps the calls, the first included.
	Attempts int
	// MaxWait is the longest single wait worth taking without knowing the caller's patience; a
	// longer one returns the error at once, unless ctx has a deadline the wait ends before (a
	// delivery's answer is worth a minute's wait; a caller without a deadline is not held).
	MaxWait time.Duration
	// Wait says how long to wait before calling again after err, and whether to call again at all.
	Wait func(err error) (time.Duration, bool)
}

// Do runs f until it succeeds, fails in a way Wait does not retry, the attempts are spent, a wait
// is over MaxWait, or ctx ends (the call's error joined with ctx's).
func (p RetryPolicy) Do(ctx context.Context, f func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return nil
		}
		d, again := p.Wait(err)
		if !again || attempt >= p.Attempts || d > p.MaxWait && !endsBefore(ctx, d) {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
	}
}

// endsBefore reports whether a wait of d ends before ctx's deadline, with room for the call after it.
func endsBefore(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) > d+time.Second/2
}
