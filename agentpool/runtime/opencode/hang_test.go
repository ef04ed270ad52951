package opencode

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestPromptCancelledWhileSubscribing: a server that never confirms the event subscription (no
// headers, or headers and then nothing) must not hold a turn whose caller gave up.
func TestPromptCancelledWhileSubscribing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers bool
	}{
		{"no headers", false},
		{"headers, no server.connected", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered := make(chan struct{}, 1)
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/session/status" {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{}`)
					return
				}
				if r.URL.Path == "/event" {
					if tc.headers {
						w.Header().Set("Content-Type", "text/event-stream")
						w.WriteHeader(http.StatusOK)
						w.(http.Flusher).Flush()
					}
					entered <- struct{}{}
					select {
					case <-release:
					case <-r.Context().Done():
					}
					return
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			defer close(release)
			r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := r.Prompt(ctx, runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, "ses_1", runtime.Prompt{Text: "hi"}, nil)
				done <- err
			}()
			<-entered
			cancel()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled)
				require.NotErrorIs(t, err, runtime.ErrSandboxDown, "the caller gave up; the sandbox is not down")
			case <-time.After(30 * time.Second):
				t.Fatal("Prompt did not return after its context was cancelled")
			}
		})
	}
}
