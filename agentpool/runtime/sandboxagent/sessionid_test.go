package sandboxagent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestSessionRefusesBadIDs: session/new's id comes from the agent (outside input), and the pool
// stores it with the thread and sends it back on every turn: an empty, huge or unprintable one is an
// error, not a session.
func TestSessionRefusesBadIDs(t *testing.T) {
	for _, tc := range []struct{ name, id string }{
		{"empty", ""},
		{"huge", strings.Repeat("x", 5000)},
		{"a control character", "ses_1\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodGet {
					_, _ = w.Write([]byte(`{"servers":[]}`))
					return
				}
				var req message
				_ = json.NewDecoder(r.Body).Decode(&req)
				result := json.RawMessage(`{}`)
				if req.Method == "session/new" {
					result, _ = json.Marshal(map[string]string{"sessionId": tc.id})
				}
				_ = json.NewEncoder(w).Encode(message{JSONRPC: "2.0", ID: req.ID, Result: result})
			}))
			defer srv.Close()
			r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
			require.NoError(t, err)
			sb := runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}
			r.state.setWorkDir(sb, "/workspace")
			_, _, err = r.Session(t.Context(), sb, "", "slack:T:C:1")
			require.ErrorContains(t, err, "session id")
		})
	}
}
