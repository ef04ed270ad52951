package sandboxhttp

import (
	"context"
	"errors"
	"time"
)

// ErrNoAnswer is a health check that got no answer within its attempt's bound.
var ErrNoAnswer = errors.New("no answer")

// StartupGrace is how long a server the caller did not start itself may take to become healthy
// before it is considered hung and restarted.
const StartupGrace = 45 * time.Second

// WaitHealthy polls check until it succeeds, with a backoff from 20 ms to 500 ms. Each attempt is
// bounded (check's attempt: 0.5 s, doubled up to 5 s after one that got no answer, ErrNoAnswer), since
// a request that lands while the server is starting may never be answered. An error wrapping fatal
// (the server refused our credentials) ends it at once, as does ctx; a server found already running
// (started false) gets StartupGrace. It returns the last check's error.
func WaitHealthy(ctx context.Context, started bool, fatal error, check func(ctx context.Context, attempt time.Duration) error) error {
	if !started {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartupGrace)
		defer cancel()
	}
	delay, attempt := 20*time.Millisecond, 500*time.Millisecond
	for {
		err := check(ctx, attempt)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, fatal), ctx.Err() != nil:
			return err
		case errors.Is(err, ErrNoAnswer):
			// Hung in the startup window, or the machine is slow: allow more next time.
			attempt = min(attempt*2, 5*time.Second)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(delay*3/2, 500*time.Millisecond)
	}
}
