package deno

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/sandbox"
)

// busyStub answers every request 503 with the Retry-After that header returns, counting them.
type busyStub struct {
	header func(now time.Time) string
	calls  atomic.Int32
}

func (s *busyStub) RoundTrip(r *http.Request) (*http.Response, error) {
	s.calls.Add(1)
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {s.header(time.Now())}},
		Body: io.NopCloser(strings.NewReader(`{"code":"SLOW_DOWN","message":"busy"}`)), Request: r}, nil
}

// TestRetryAfterForms: Retry-After in either form (delta-seconds or HTTP-date) past the caller's
// deadline ends a retried call at once with the outage, without asking again.
func TestRetryAfterForms(t *testing.T) {
	for name, header := range map[string]func(time.Time) string{
		"seconds":   func(time.Time) string { return "25" },
		"HTTP-date": func(now time.Time) string { return now.Add(25 * time.Second).UTC().Format(http.TimeFormat) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				stub := &busyStub{header: header}
				p, err := New(Options{Token: "ddo_stub", HTTPClient: &http.Client{Transport: stub}, Logger: zaptest.NewLogger(t)})
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				start := time.Now()
				_, err = p.do(ctx, "list", http.MethodGet, "https://console.invalid/api/v3/sandboxes", nil, nil, true, 0)
				require.ErrorIs(t, err, sandbox.ErrUnavailable)
				require.EqualValues(t, 1, stub.calls.Load(), "asked again before Retry-After")
				require.Zero(t, time.Since(start), "no wait on the fake clock")
			})
		})
	}
}
