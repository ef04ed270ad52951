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
// in the next round (http.DefaultTransport closed all but 2 and dialled again), and a burst opens no
// more than the per-host bound.
func TestAPIClientKeepsAndBoundsConnections(t *testing.T) {
	var opened atomic.Int32
	release := make(chan struct{})
	var inFlight sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			inFlight.Done()
			<-release
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := bot.APIClient()
	get := func(path string) {
		res, err := c.Get(srv.URL + path)
		if err == nil {
			_ = res.Body.Close()
		}
	}

	// Round one: 16 calls held at once, so 16 connections.
	inFlight.Add(16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { get("/hold") })
	}
	inFlight.Wait()
	close(release)
	wg.Wait()
	require.EqualValues(t, 16, opened.Load())
	// Round two: 16 more, one after another and at once: every one on a kept connection.
	for range 16 {
		wg.Go(func() { get("/") })
	}
	wg.Wait()
	require.EqualValues(t, 16, opened.Load(), "the second round reused the first round's connections")

	// A burst of 300 calls opens at most the per-host bound.
	for range 300 {
		wg.Go(func() { get("/") })
	}
	wg.Wait()
	require.LessOrEqual(t, opened.Load(), int32(64))
}
