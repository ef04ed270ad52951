package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHealthcheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			_, _ = w.Write([]byte("ok\n"))
		case "/readyz":
			http.Error(w, "draining: not taking new turns", http.StatusServiceUnavailable)
		case "/slow":
			<-r.Context().Done() // answers only when the client gives up
		}
	}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"every URL answers 200", []string{srv.URL + "/healthz", srv.URL + "/healthz"}, 0, ""},
		{"one URL fails, with the reason", []string{srv.URL + "/healthz", srv.URL + "/readyz"}, 1,
			srv.URL + "/readyz: 503 Service Unavailable: draining: not taking new turns"},
		{"a hung server times out", []string{"-timeout", "50ms", srv.URL + "/slow"}, 1, "deadline exceeded"},
		{"nothing listening", []string{"http://127.0.0.1:1/healthz"}, 1, "connection refused"},
		{"no URL is a usage error", nil, 2, "usage: healthcheck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			start := time.Now()
			require.Equal(t, tc.code, run(tc.args, &stderr), stderr.String())
			require.Less(t, time.Since(start), 10*time.Second)
			if tc.stderr == "" {
				require.Empty(t, stderr.String())
			} else {
				require.Contains(t, stderr.String(), tc.stderr)
			}
		})
	}
}
