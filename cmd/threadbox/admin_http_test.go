package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CLI's way to a running serve put the command word into the URL as typed, so "../healthz" or
// "stats?x" asked for another path, or another query, than an admin command's. Only a known command
// is sent now; anything else is refused here, before any request.
func TestAdminOverHTTPSendsOnlyKnownCommands(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.RequestURI)
		_ = json.NewEncoder(w).Encode(map[string]string{"output": "ok"})
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, baseEnv(t, "THREADBOX_HTTP_ADDR="+addr))
	require.NoError(t, m.ParseFlags([]string{"admin"}))
	t.Cleanup(func() { require.NoError(t, m.Close()) })

	for _, cmd := range []string{"../../healthz", "stats?x=1", "stats#frag", "a/b", "%2e%2e", "nope"} {
		err := m.adminOverHTTP(t.Context(), []string{cmd}, "the database is held")
		require.ErrorContains(t, err, "unknown admin command", cmd)
	}
	require.Empty(t, got, "nothing was sent")

	require.NoError(t, m.adminOverHTTP(t.Context(), []string{"STATS"}, "the database is held"))
	require.Equal(t, []string{"POST /api/admin/stats"}, got)
}
