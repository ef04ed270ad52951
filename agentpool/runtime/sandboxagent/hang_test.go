package sandboxagent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestPromptCancelledWhileSubscribing: a server that never answers the event subscription must not
// hold a turn whose caller gave up.
func TestPromptCancelledWhileSubscribing(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/acp/") {
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
	r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
	require.NoError(t, err)
	sb := runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}
	r.state.with(sb, func(st *sbState) { st.loaded["s1"] = true })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := r.Prompt(ctx, sb, "s1", runtime.Prompt{Text: "hi"}, nil)
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
}
