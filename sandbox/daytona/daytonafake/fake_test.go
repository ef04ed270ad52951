package daytonafake_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestValidation: requests that break the specs are refused with Daytona's error shape and recorded;
// valid ones are not.
func TestValidation(t *testing.T) {
	f := daytonafake.New(t, daytonafake.Options{Backend: sandboxfake.New(), Snapshots: []string{"snap"}, ExpectViolations: true})
	// path is from the server root: /api/… or /toolbox/{sandboxId}/…
	send := func(method, path, body string, hdr map[string]string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), method, strings.TrimSuffix(f.APIURL(), "/api")+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+daytonafake.APIKey)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		wantStatus               int
		violation                bool
	}{
		{name: "valid list", method: "GET", path: "/api/sandbox?labels=%7B%7D", wantStatus: 200},
		{name: "valid get of a missing sandbox", method: "GET", path: "/api/sandbox/nope", wantStatus: 404},
		{name: "wrong type in body", method: "POST", path: "/api/sandbox", body: `{"cpu":"two"}`, wantStatus: 400, violation: true},
		{name: "no such path", method: "GET", path: "/api/sandboxes", wantStatus: 400, violation: true},
		{name: "bad limit", method: "GET", path: "/api/sandbox?limit=many", wantStatus: 400, violation: true},
		{name: "toolbox without SDK version", method: "POST", path: "/toolbox/x/process/session", body: `{"sessionId":"s"}`,
			wantStatus: 404, violation: true},
		{name: "toolbox with SDK version", method: "POST", path: "/toolbox/x/process/session", body: `{"sessionId":"s"}`,
			hdr: map[string]string{"X-Daytona-SDK-Version": "0.218.0"}, wantStatus: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Violations())
			resp := send(tc.method, tc.path, tc.body, tc.hdr)
			require.Equal(t, tc.wantStatus, resp.StatusCode)
			require.Equal(t, tc.violation, len(f.Violations()) > before, "violations: %v", f.Violations())
		})
	}
}
