package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMetricsNeedTheTokenOrLoopback: /metrics is the operators' business. With http.token set every
// scraper must send it; without one only loopback clients are served.
func TestMetricsNeedTheTokenOrLoopback(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
	for _, tc := range []struct {
		name, token, remote, auth string
		want                      int
	}{
		{"token set, none sent", "s3cret", "127.0.0.1:5000", "", http.StatusUnauthorized},
		{"token set, wrong one", "s3cret", "10.0.0.1:5000", "Bearer nope", http.StatusUnauthorized},
		{"token set, right one", "s3cret", "10.0.0.1:5000", "Bearer s3cret", http.StatusOK},
		{"no token, loopback", "", "127.0.0.1:5000", "", http.StatusOK},
		{"no token, IPv6 loopback", "", "[::1]:5000", "", http.StatusOK},
		{"no token, remote", "", "10.0.0.1:5000", "", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.RemoteAddr = tc.remote
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			metricsHandler(tc.token, ok).ServeHTTP(w, r)
			require.Equal(t, tc.want, w.Code, w.Body.String())
		})
	}
}
