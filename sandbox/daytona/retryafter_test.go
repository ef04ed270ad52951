package daytona

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// TestRetryAfterPastDeadlineStopsAtOnce: told to come back after the caller's deadline, a call stops
// at once with the service's unavailability, instead of waiting out the deadline.
func TestRetryAfterPastDeadlineStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Provider{opts: Options{RequestTimeout: time.Minute}}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		sends := 0
		start := time.Now()
		err := p.call(ctx, "get x", func(context.Context) (*http.Response, error) {
			sends++
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"20"}},
				Body: io.NopCloser(strings.NewReader(`{"message":"maintenance"}`))}, nil
		}, nil)
		require.ErrorIs(t, err, sandbox.ErrUnavailable)
		require.Equal(t, 1, sends)
		require.Zero(t, time.Since(start), "no wait on the fake clock")
	})
}
