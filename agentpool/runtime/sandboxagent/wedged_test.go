package sandboxagent

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
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestWedgedAgentIsRestarted: sandbox-agent's health check answers while the ACP agent behind it is
// wedged (initialize never answers). Session must not wait on it for the whole turn (the watchdog's
// ten minutes, every turn, for ever): it gives up as sandbox-down, and the next Ensure, whose health
// check still passes, restarts the server.
func TestWedgedAgentIsRestarted(t *testing.T) {
	var restarted atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/health":
			_, _ = w.Write([]byte(`{}`))
		case r.Method == http.MethodGet:
			_, _ = w.Write([]byte(`{"servers":[]}`))
		default:
			var req message
			_ = json.NewDecoder(r.Body).Decode(&req)
			if !restarted.Load() {
				<-r.Context().Done() // wedged
				return
			}
			_ = json.NewEncoder(w).Encode(message{JSONRPC: "2.0", ID: req.ID, Result: json.RawMessage(`{"sessionId":"ses_1"}`)})
		}
	}))
	defer srv.Close()
	r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
	require.NoError(t, err)
	r.initTimeout = 50 * time.Millisecond
	sb := runtimetest.LaunchSandbox{DialSandbox: runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, Output: "/workspace\nstarted\n", Restarted: &restarted}
	r.state.setWorkDir(sb, "/workspace")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // only so that a regression fails rather than hangs
	defer cancel()

	_, _, err = r.Session(ctx, sb, "", "t")
	require.Error(t, err)
	require.Equal(t, runtime.ClassSandboxDown, runtime.Classify(err), "%v", err)

	require.NoError(t, r.Ensure(ctx, sb))
	require.True(t, restarted.Load(), "the server was restarted")
	id, replaced, err := r.Session(ctx, sb, "", "t")
	require.NoError(t, err)
	require.Equal(t, "ses_1", id)
	require.True(t, replaced)
}
