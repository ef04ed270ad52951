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

// TestRetryAfterForms: Retry-After in delta-seconds and in HTTP-date form, capped; a date past or
// unreadable is no wait.
func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"7":   7 * time.Second,
		"0":   0,
		"-3":  0,
		"abc": 0,
		"1.5": 0,
		now.Add(12 * time.Second).Format(http.TimeFormat): 12 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
		now.Add(48 * time.Hour).Format(http.TimeFormat):   maxRetryAfter,
		"999999": maxRetryAfter,
	} {
		require.Equal(t, want, parseRetryAfter(in, now), "Retry-After: %q", in)
	}
}

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
