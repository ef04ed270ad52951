package bot_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

// TestAPIClientKeepsAndBoundsConnections: concurrent calls to one API host reuse their connections
// in the next round (http.DefaultTransport closed all but 2 and dialled again), and a burst of calls
// held by the server opens no more than the per-host bound; the rest wait and reuse them.
func TestAPIClientKeepsAndBoundsConnections(t *testing.T) {
	var opened atomic.Int32
	var (
		mu      sync.Mutex // protects release and arrived
		release = make(chan struct{})
		arrived = make(chan struct{}, 1000)
	)
	hold := func() chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		return release
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			gate := hold()
			arrived <- struct{}{}
			<-gate
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := bot.APIClient(64)
	get := func(path string) {
		res, err := c.Get(srv.URL + path)
		if err == nil {
			_ = res.Body.Close()
		}
	}
	// burst sends n held calls, waits until want of them are at the server, then lets all go (the
	// gate stays open until the next burst).
	burst := func(n, want int) {
		mu.Lock()
		release = make(chan struct{})
		mu.Unlock()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { get("/hold") })
		}
		for range want {
			<-arrived
		}
		mu.Lock()
		close(release)
		mu.Unlock()
		wg.Wait()
		for len(arrived) > 0 { // the calls that waited for a connection, served after the release
			<-arrived
		}
	}

	// Round one: 16 calls held at once, so 16 connections.
	burst(16, 16)
	require.EqualValues(t, 16, opened.Load())
	// Round two: 16 more at once, every one on a kept connection.
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { get("/") })
	}
	wg.Wait()
	require.EqualValues(t, 16, opened.Load(), "the second round reused the first round's connections")

	// 100 calls held at once: 64 connections, and the other 36 wait for them.
	burst(100, 64)
	require.EqualValues(t, 64, opened.Load())
}
