package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
			h := readyHandler(fakePinger{tc.pingErr}, fakeDrainer(tc.draining), nil, zap.New(core))
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

// shortTimeouts makes serve's HTTP timeouts short enough to watch them act.
var shortTimeouts = httpTimeouts{ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond,
	Write: 600 * time.Millisecond, Idle: 600 * time.Millisecond}

// serveWithTimeouts runs serve in process on the local provider with the given HTTP timeouts.
func serveWithTimeouts(t *testing.T, to httpTimeouts) *server {
	t.Helper()
	env := baseEnv(t, "THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true", "THREADBOX_SANDBOX_PROVIDER=local",
		"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true", "THREADBOX_SANDBOX_LOCAL_DIR="+t.TempDir())
	var stdout, stderr strings.Builder
	m := NewMain(&stdout, &stderr, env)
	m.httpTimeouts = to
	addrc := make(chan string, 1)
	m.OnListen = func(a string) { addrc <- a }
	require.NoError(t, m.ParseFlags([]string{"serve"}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, m.Close())
	})
	select {
	case addr := <-addrc:
		return &server{url: "http://" + addr}
	case err := <-done:
		t.Fatalf("serve exited early: %v", err)
	}
	return nil
}

// TestSlowClientsAreCutOff: a client that stalls in its headers, in its body or between requests
// loses its connection once the timeout passes; the server does not wait for it.
func TestSlowClientsAreCutOff(t *testing.T) {
	s := serveWithTimeouts(t, shortTimeouts)
	conv := s.post(t, "/api/conversations", map[string]any{})["id"].(string)
	for _, tc := range []struct{ name, send string }{
		{"headers never end", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "},
		{"body never ends", "POST /api/conversations/" + conv + "/messages HTTP/1.1\r\nHost: x\r\n" +
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"text\": \"ec"},
		{"idle after a request", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
			require.NoError(t, err)
			defer conn.Close()
			_, err = io.WriteString(conn, tc.send)
			require.NoError(t, err)
			// A bound for the test only: the server must close well before it.
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
			start := time.Now()
			rest, err := io.ReadAll(conn) // whatever the server answers, then EOF when it closes
			require.NoError(t, err, "the server closed the connection (got %q)", rest)
			require.Less(t, time.Since(start), 20*time.Second)
			if tc.name == "idle after a request" {
				require.Contains(t, string(rest), "200 OK", "the request itself was served")
			}
		})
	}
}

// TestEventStreamOutlivesTheTimeouts: the web chat's event stream stays open past the read and write
// timeouts and still delivers the answer of a turn posted after them.
func TestEventStreamOutlivesTheTimeouts(t *testing.T) {
	s := serveWithTimeouts(t, shortTimeouts)
	conv := s.post(t, "/api/conversations", map[string]any{})["id"].(string)
	ev := s.events(t, conv)
	// Not synchronization: the point is that the deadlines pass while the stream is open.
	<-time.After(3 * shortTimeouts.Write)
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "echo still-streaming"})
	require.Contains(t, ev.until(t, "post", "still-streaming"), "still-streaming")
}
