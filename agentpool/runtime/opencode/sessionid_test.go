package opencode

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestSessionRefusesBadIDs: the session id comes from the server in the sandbox (outside input), and
// the pool stores it with the thread and sends it back on every turn. An empty, huge or unprintable
// one is an error, not a session; a found session with such an id is passed over.
func TestSessionRefusesBadIDs(t *testing.T) {
	for _, tc := range []struct{ name, id string }{
		{"empty", ""},
		{"huge", "ses_" + strings.Repeat("x", 5000)},
		{"a control character", "ses_1\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.Method == http.MethodGet && r.URL.Path == "/session":
					_ = json.NewEncoder(w).Encode([]map[string]any{{"id": tc.id, "title": "slack:T:C:1"}})
				case r.Method == http.MethodPost && r.URL.Path == "/session":
					_ = json.NewEncoder(w).Encode(map[string]any{"id": tc.id, "title": "slack:T:C:1"})
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
			require.NoError(t, err)
			_, _, err = r.Session(t.Context(), runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, "", "slack:T:C:1")
			require.ErrorContains(t, err, "session id")
		})
	}
}
