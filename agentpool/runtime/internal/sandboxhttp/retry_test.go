package sandboxhttp

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetry walks the backoff on a fake clock: what ends it, and when.
func TestRetry(t *testing.T) {
	errBusy, errGone := errors.New("busy"), errors.New("gone")
	tests := []struct {
		name string
		// answers are the tries' results in order; past the end, the last repeats.
		answers   []error
		wantErr   error
		wantTries []time.Duration // when each try ran, from the start
	}{
		{"at once", []error{nil}, nil, []time.Duration{0}},
		{"after two failures", []error{errBusy, errBusy, nil}, nil, []time.Duration{0, 25 * time.Millisecond, 75 * time.Millisecond}},
		{"a permanent failure ends it", []error{errBusy, errGone}, errGone, []time.Duration{0, 25 * time.Millisecond}},
		{"the window ends it", []error{errBusy}, errBusy, []time.Duration{0, 25 * time.Millisecond, 75 * time.Millisecond,
			175 * time.Millisecond, 375 * time.Millisecond, 775 * time.Millisecond, 1575 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var tries []time.Duration
				err := Retry(context.Background(), 2*time.Second, func(err error) bool { return errors.Is(err, errGone) },
					func(ctx context.Context) error {
						tries = append(tries, time.Since(start))
						return tt.answers[min(len(tries), len(tt.answers))-1]
					})
				require.Equal(t, tt.wantTries, tries)
				if tt.wantErr == nil {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, tt.wantErr)
			})
		})
	}
}

// TestRetryCallerGivesUp: a caller that gives up while Retry waits gets its own cause back at once.
func TestRetryCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := errors.New("stop pressed")
		ctx, cancel := context.WithCancelCause(context.Background())
		tries := 0
		done := make(chan error)
		go func() {
			done <- Retry(ctx, time.Hour, func(error) bool { return false }, func(context.Context) error {
				tries++
				return errors.New("refused")
			})
		}()
		synctest.Wait() // the first try failed; Retry waits
		cancel(stop)
		require.ErrorIs(t, <-done, stop)
		require.Equal(t, 1, tries)
	})
}

// TestPacer: drops in a row wait longer each time, up to RetryMaxDelay; progress starts over.
func TestPacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pacer
		waited := func() time.Duration {
			start := time.Now()
			require.NoError(t, p.Wait(t.Context()))
			return time.Since(start)
		}
		var got []time.Duration
		for range 8 {
			got = append(got, waited())
		}
		require.Equal(t, []time.Duration{0, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
			200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second}, got)
		p.Reset()
		require.Zero(t, waited(), "after progress, at once")
		require.Equal(t, RetryFirstDelay, waited())

		stop := errors.New("stop pressed")
		ctx, cancel := context.WithCancelCause(t.Context())
		done := make(chan error)
		go func() { done <- p.Wait(ctx) }()
		synctest.Wait()
		cancel(stop)
		require.ErrorIs(t, <-done, stop, "a caller that gives up is not held")
	})
}
