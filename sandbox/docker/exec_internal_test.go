package docker

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// fakeHungExecDaemon creates execs and attaches to them, then sends nothing and never closes the
// stream: a remote engine cut off mid-stream, or a hung daemon. attached is closed once the stream
// is hijacked.
func fakeHungExecDaemon(t *testing.T) (p *Provider, attached <-chan struct{}) {
	t.Helper()
	att := make(chan struct{})
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/exec"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]string{"Id": "e1"})
		case strings.HasSuffix(r.URL.Path, "/start"):
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			_, _ = buf.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n" +
				"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
			_ = buf.Flush()
			close(att)
		default:
			http.Error(w, "unexpected "+r.URL.Path, http.StatusTeapot)
		}
	}))
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		srv.Close()
	})
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithVersion("1.45"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return &Provider{cli: cli, log: zap.NewNop(), stopTimeout: time.Second, cpu: cpuSamples{last: map[string]cpuSample{}}}, att
}

// The provider's own execs (the kill rounds) are bounded by their ctx even once attached: a stream
// that stays open without data must not hold the kill, and with it Exec, past the cleanup deadline.
func TestExecInternalEndsWithCtxOnAHungStream(t *testing.T) {
	p, attached := fakeHungExecDaemon(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := p.execInternal(ctx, "c1", "1000:1000", []string{"true"})
		done <- err
	}()
	<-attached
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second): // a failsafe against a hang, not a timing assertion
		t.Fatal("execInternal still reading a hung stream after its ctx ended")
	}
}

// A container that is gone or stopped has no process left to kill: the kill stops at the first
// answer saying so, instead of retrying it ten times with backoff (seconds added to the Exec that
// timed out, or to the Close of a Dial conn, when the sandbox was stopped or removed meanwhile).
func TestKillStopsWhenTheContainerIsGone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		msg    string
	}{
		{"removed", http.StatusNotFound, "No such container: c1"},
		{"stopped", http.StatusConflict, "container c1 is not running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			calls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls++
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_ = json.NewEncoder(w).Encode(map[string]string{"message": tc.msg})
			}))
			t.Cleanup(srv.Close)
			cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithVersion("1.45"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = cli.Close() })
			p := &Provider{cli: cli, log: zap.NewNop(), stopTimeout: time.Second, cpu: cpuSamples{last: map[string]cpuSample{}}}
			require.NoError(t, p.killTagged(t.Context(), "c1", "1000:1000", "marker"))
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, 1, calls, "one exec create, answered for good")
		})
	}
}
