package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `threadbox admin drain` is for the serve process on this host. When the CLI could open the
// database itself (PostgreSQL, or SQLite with no serve running), it drained a pool of its own that
// had never taken a turn and printed "Drained", while the replica went on taking turns and its
// /readyz stayed 200. It now always asks the serve at http.addr.
func TestAdminDrainGoesToTheServeProcess(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path
		_ = json.NewEncoder(w).Encode(map[string]string{"output": "drained by serve"})
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	out, _, err := runMain(t, baseEnv(t, "THREADBOX_HTTP_ADDR="+addr, "THREADBOX_SANDBOX_PROVIDER=local",
		"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true", "THREADBOX_RUNTIME_NAME=shell"), "admin", "drain")
	require.NoError(t, err)
	require.Equal(t, "drained by serve\n", out)
	select {
	case req := <-got:
		require.Equal(t, "POST /api/admin/drain", req)
	default:
		t.Fatal("the serve process was never asked to drain")
	}
}
