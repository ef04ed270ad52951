package bot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// retryableErr is an SDK error that says itself whether it is worth retrying (slack-go's do).
type retryableErr bool

func (e retryableErr) Error() string   { return "sdk error" }
func (e retryableErr) Retryable() bool { return bool(e) }

func TestRetryLater(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"none":                 {nil, false},
		"rate limited":         {fmt.Errorf("posting: %w", &RateLimitedError{}), true},
		"timed out":            {fmt.Errorf("posting: %w", context.DeadlineExceeded), true},
		"connection refused":   {&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		"sdk: retryable":       {fmt.Errorf("x: %w", retryableErr(true)), true},
		"sdk: not retryable":   {retryableErr(false), false},
		"marked transient":     {Transient(errors.New("HTTP 502")), true},
		"a refusal":            {errors.New("channel_not_found"), false},
		"cancelled by the bot": {context.Canceled, false},
	} {
		require.Equal(t, tc.want, RetryLater(tc.err), name)
	}
	require.NoError(t, Transient(nil))
}
