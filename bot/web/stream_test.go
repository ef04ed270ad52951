package web

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamClientThatNeverReads: a client that opens an event stream and then reads nothing must
// not hold its handler (and connection) for ever: once its socket buffers are full, the stream is
// ended after the write timeout.
func TestStreamClientThatNeverReads(t *testing.T) {
	srv := newTestServerWith(t, Options{TrustLoopback: true})
	srv.streamWriteTimeout = 100 * time.Millisecond
	closed := make(chan struct{}, 1)
	ts := httptest.NewUnstartedServer(srv)
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	ts.Start()
	defer ts.Close()

	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = conn.Write([]byte("GET /api/conversations/slow/events HTTP/1.1\r\nHost: " + ts.Listener.Addr().String() + "\r\n\r\n"))
	require.NoError(t, err)

	// The stream subscribes before it writes its first line: read up to it, then nothing more.
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "retry:") {
			break
		}
	}
	c := srv.lookup("slow", false)
	big := strings.Repeat("x", displayTextMax)
	for range 600 {
		c.publish(Event{Type: EventPost, Text: big})
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream of a client that reads nothing was still open 10 s later")
	}
}

// TestEventStreamsAreCapped: a client could open any number of event streams, each holding a
// handler, a connection and a 256-event buffer, and a conversation with a stream open is never
// forgotten; now a conversation takes a bounded number and the server a bounded total (429 past
// either), and a HEAD request is answered with the headers alone instead of holding a stream open.
func TestEventStreamsAreCapped(t *testing.T) {
	srv := newTestServerWith(t, Options{TrustLoopback: true})
	srv.maxStreams, srv.maxConvStreams = 3, 2
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close) // after the streams' own cleanups end them
	url := func(conv string) string { return ts.URL + "/api/conversations/" + conv + "/events" }

	res, err := ts.Client().Head(url("a"))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream; charset=utf-8", res.Header.Get("Content-Type"))
	require.Nil(t, srv.lookup("a", false), "a HEAD request registers nothing and holds no stream")

	openStream(t, ts.Client(), url("a"), nil)
	openStream(t, ts.Client(), url("a"), nil)
	var e errorJSON
	require.Equal(t, http.StatusTooManyRequests, do(t, ts.Client(), "GET", url("a"), nil, nil, &e))
	require.Contains(t, e.Error, "too many event streams")

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url("b"), nil)
	require.NoError(t, err)
	res, err = ts.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, http.StatusTooManyRequests, do(t, ts.Client(), "GET", url("c"), nil, nil, &e), "the server's total is reached")

	cancel() // a stream that ends gives its place back
	res.Body.Close()
	require.Eventually(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.streams == 2
	}, 10*time.Second, 5*time.Millisecond)
	openStream(t, ts.Client(), url("c"), nil)
}
