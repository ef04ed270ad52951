package opencode

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestWedgedServerIsRestarted: opencode answers /global/health while its session calls hang. Each
// turn then waited out the header timeout and failed as sandbox-down, and Ensure, seeing a healthy
// server, never restarted it. A call left unanswered now makes the next Ensure restart the server.
func TestWedgedServerIsRestarted(t *testing.T) {
	var restarted atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/global/health":
			_, _ = w.Write([]byte(`{"healthy":true}`))
		case !restarted.Load():
			<-r.Context().Done() // wedged
		case r.Method == http.MethodGet:
			_, _ = w.Write([]byte(`[]`))
		default:
			_ = json.NewEncoder(w).Encode(map[string]string{"id": "ses_1"})
		}
	}))
	defer srv.Close()
	r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
	require.NoError(t, err)
	r.clients.ResponseHeaderTimeout = 50 * time.Millisecond
	sb := runtimetest.LaunchSandbox{DialSandbox: runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, Output: "started\n", Restarted: &restarted}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // only so that a regression fails rather than hangs
	defer cancel()

	require.NoError(t, r.Ensure(ctx, sb))
	require.False(t, restarted.Load(), "a healthy server is left alone")
	_, _, err = r.Session(ctx, sb, "", "t")
	require.Equal(t, runtime.ClassSandboxDown, runtime.Classify(err), "%v", err)

	require.NoError(t, r.Ensure(ctx, sb))
	require.True(t, restarted.Load(), "the server was restarted")
	id, _, err := r.Session(ctx, sb, "", "t")
	require.NoError(t, err)
	require.Equal(t, "ses_1", id)
	require.False(t, r.clients.Unanswered(sb))
}
