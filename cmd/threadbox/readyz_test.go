package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

type pingingProvider struct {
	*sandboxfake.Provider
	name string
	err  *atomic.Pointer[error]
	// hang makes Ping wait for its context.
	hang bool
}

func newPinging(name string, err error) pingingProvider {
	p := pingingProvider{Provider: sandboxfake.New(), name: name, err: &atomic.Pointer[error]{}}
	p.err.Store(&err)
	return p
}

func (p pingingProvider) Name() string {
	if p.name == "" {
		return p.Provider.Name()
	}
	return p.name
}

func (p pingingProvider) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping: %w", err) // as a real client refuses a spent context
	}
	if p.hang {
		<-ctx.Done()
		return fmt.Errorf("ping: %w", ctx.Err())
	}
	return *p.err.Load()
}

func TestReadyzProviderStatus(t *testing.T) {
	tests := []struct {
		name string
		prov sandbox.Provider
		want string
	}{
		{"no ping capability", sandboxfake.New(), "provider fake: ok"},
		{"answers", newPinging("", nil), "provider fake: ok"},
		{"outage, without the daemon's text", newPinging("", fmt.Errorf("docker ping: %w: Cannot connect to the Docker daemon at unix:///var/run/docker.sock", sandbox.ErrUnavailable)),
			"provider fake: unavailable (turns wait for it)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, newProviderStatus([]sandbox.Provider{tc.prov}, zap.NewNop())(t.Context()))
		})
	}
}

// Probes come every few seconds: an outage is logged when it begins and when it ends, not on every
// probe, for the database and for each provider alike.
func TestReadyzLogsOutagesOnChange(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	db := &flakyPinger{}
	prov := newPinging("docker", nil)
	h := readyHandler(db, fakeDrainer(false), newProviderStatus([]sandbox.Provider{prov}, zap.New(core)), zap.New(core))
	probe := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}
	down := fmt.Errorf("dial: %w", sandbox.ErrUnavailable)
	prov.err.Store(&down)
	for range 5 {
		require.Equal(t, http.StatusOK, probe(), "a provider outage does not fail readiness")
	}
	db.err.Store(&down)
	for range 5 {
		require.Equal(t, http.StatusServiceUnavailable, probe())
	}
	var none error
	db.err.Store(&none)
	prov.err.Store(&none)
	for range 3 {
		require.Equal(t, http.StatusOK, probe())
	}
	var got []string
	for _, e := range logs.All() {
		got = append(got, fmt.Sprintf("%s %s %s", e.Level, e.Message, e.ContextMap()["dependency"]))
	}
	require.Equal(t, []string{
		zapcore.WarnLevel.String() + " readyz: sandbox provider does not answer provider docker",
		zapcore.WarnLevel.String() + " readyz: database ping failed database",
		zapcore.InfoLevel.String() + " readyz: database answers again database",
		zapcore.InfoLevel.String() + " readyz: sandbox provider answers again provider docker",
	}, got)
}

// A provider that hangs costs the others nothing: they are asked at once, not one after another.
func TestReadyzProvidersAskedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := newPinging("daytona", nil)
		slow.hang = true
		fast := newPinging("docker", nil)
		start := time.Now()
		got := newProviderStatus([]sandbox.Provider{slow, fast}, zap.NewNop())(context.Background())
		require.Equal(t, "provider daytona: unavailable (turns wait for it); provider docker: ok", got)
		require.Equal(t, readyTimeout, time.Since(start), "the probe waits for the slowest alone, not their sum")
	})
}

type flakyPinger struct{ err atomic.Pointer[error] }

func (f *flakyPinger) Ping(context.Context) error {
	if e := f.err.Load(); e != nil {
		return *e
	}
	return nil
}
