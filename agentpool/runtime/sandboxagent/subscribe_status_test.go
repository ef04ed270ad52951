package sandboxagent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestSubscribeStatusClasses: only a 404 on the event stream means the ACP server (and with it the
// session) is gone. A server error is the sandbox failing, which the pool meets by re-resolving,
// not by dropping the agent's session and replaying the history into a new one.
func TestSubscribeStatusClasses(t *testing.T) {
	tests := []struct {
		status      int
		wantMissing bool
		wantDown    bool
	}{
		{http.StatusNotFound, true, false},
		{http.StatusServiceUnavailable, false, true},
		{http.StatusInternalServerError, false, true},
		{http.StatusUnauthorized, false, false},
		{http.StatusRequestHeaderFieldsTooLarge, false, false},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/acp/") {
					http.Error(w, "no", tt.status)
					return
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
			require.NoError(t, err)
			sb := runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}
			r.state.with(sb, func(st *sbState) { st.loaded["s1"] = true })
			_, err = r.Prompt(t.Context(), sb, "s1", runtime.Prompt{Text: "hi"}, nil)
			require.Error(t, err)
			require.Equal(t, tt.wantMissing, runtime.Classify(err) == runtime.ClassSessionMissing, "%v", err)
			require.Equal(t, tt.wantDown, runtime.Classify(err) == runtime.ClassSandboxDown, "%v", err)
		})
	}
}
