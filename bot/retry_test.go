package bot

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

var errSlowDown = errors.New("slow down")

func TestRetryPolicy(t *testing.T) {
	wait := func(err error) (time.Duration, bool) { return time.Second, errors.Is(err, errSlowDown) }
	tests := []struct {
		name      string
		fails     []error // the calls' errors in turn; past the end, success
		wantCalls int
		wantErr   error
		maxWait   time.Duration
		deadline  time.Duration // the caller's deadline, if any
	}{
		{name: "first call succeeds", wantCalls: 1},
		{name: "rate limited twice, then succeeds", fails: []error{errSlowDown, errSlowDown}, wantCalls: 3},
		{name: "not a retryable error", fails: []error{context.DeadlineExceeded}, wantCalls: 1, wantErr: context.DeadlineExceeded},
		{name: "attempts spent", fails: []error{errSlowDown, errSlowDown, errSlowDown, errSlowDown}, wantCalls: 3, wantErr: errSlowDown},
		{name: "wait longer than worth taking", fails: []error{errSlowDown}, wantCalls: 1, wantErr: errSlowDown, maxWait: time.Millisecond},
		// A delivery has its own deadline: a Retry-After past MaxWait that still ends within it is
		// waited out, since giving up loses an acknowledged message's answer.
		{name: "long wait within the caller's deadline", fails: []error{errSlowDown}, wantCalls: 2, maxWait: time.Millisecond, deadline: 2 * time.Second},
		{name: "long wait past the caller's deadline", fails: []error{errSlowDown}, wantCalls: 1, wantErr: errSlowDown, maxWait: time.Millisecond, deadline: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := RetryPolicy{Attempts: 3, MaxWait: time.Minute, Wait: wait}
				if tt.maxWait > 0 {
					p.MaxWait = tt.maxWait
				}
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				calls := 0
				start := time.Now()
				err := p.Do(ctx, func(context.Context) error {
					calls++
					if calls <= len(tt.fails) {
						return tt.fails[calls-1]
					}
					return nil
				})
				require.ErrorIs(t, err, tt.wantErr)
				if tt.wantErr == nil {
					require.NoError(t, err)
				}
				require.Equal(t, tt.wantCalls, calls)
				require.Equal(t, time.Duration(calls-1)*time.Second, time.Since(start), "one wait between calls")
			})
		})
	}
	t.Run("context ends during a wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			err := RetryPolicy{Attempts: 3, MaxWait: time.Minute, Wait: wait}.Do(ctx, func(context.Context) error { return errSlowDown })
			require.ErrorIs(t, err, errSlowDown)
			require.ErrorIs(t, err, context.DeadlineExceeded)
		})
	})
}
