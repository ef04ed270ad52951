package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

type fakePinger struct{ err error }

func (f fakePinger) Ping(context.Context) error { return f.err }

type fakeDrainer bool

func (f fakeDrainer) Draining() bool { return bool(f) }

func TestReadyzHidesTheDatabaseError(t *testing.T) {
	const detail = `failed to connect to user=threadbox database=prod host=10.0.0.7: password authentication failed`
	for _, tc := range []struct {
		name     string
		pingErr  error
		draining bool
		status   int
		body     string
		logged   string
	}{
		{name: "ready", status: http.StatusOK, body: "ready\n"},
		{name: "database down", pingErr: errors.New(detail), status: http.StatusServiceUnavailable,
			body: "database: unavailable\n", logged: detail},
		{name: "draining", draining: true, status: http.StatusServiceUnavailable, body: "draining: not taking new turns\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.DebugLevel)
			h := readyHandler(fakePinger{tc.pingErr}, fakeDrainer(tc.draining), zap.New(core))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			require.Equal(t, tc.status, rec.Code)
			require.Equal(t, tc.body, rec.Body.String())
			require.NotContains(t, rec.Body.String(), "10.0.0.7")
			if tc.logged != "" {
				require.Equal(t, 1, logs.FilterFieldKey("error").Len())
				require.Contains(t, logs.All()[0].ContextMap()["error"], tc.logged, "the operator still sees why")
			}
		})
	}
}
