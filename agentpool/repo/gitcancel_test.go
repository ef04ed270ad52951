package repo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A forge that accepts the connection and never answers: cancelling the context must end the
// clone, even though git's HTTP helper (git-remote-https, a child of git) still holds git's
// stderr pipe and would otherwise keep it open for as long as the forge stalls.
func TestRunStopsOnCancelWhileTheForgeHangs(t *testing.T) {
	reached := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case reached <- struct{}{}:
		default:
		}
		<-release
	}))
	defer srv.Close()
	defer close(release)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := git{token: "tok"}.run(ctx, t.TempDir(), "clone", "--bare", "--quiet", srv.URL+"/acme/app.git", "dest")
		done <- err
	}()
	<-reached
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("clone of a hanging forge succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
}
