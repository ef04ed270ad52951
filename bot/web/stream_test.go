package web

import (
	"bufio"
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
