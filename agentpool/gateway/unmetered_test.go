package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnmeterableCallsAreRefused: the gateway counts a call by the usage in its answer, so a call
// whose answer will carry none must not reach the upstream. A background Response answers "queued"
// with no usage and runs on, billed, where the gateway never sees it; a stream flag the gateway
// cannot read as a boolean ("true" as a string, which a lenient upstream may take) keeps it from
// asking for a chat stream's usage; and a body it cannot read as JSON hides both.
func TestUnmeterableCallsAreRefused(t *testing.T) {
	tests := []struct {
		name, path, body string
	}{
		{"background response", OpenAIPath + "/responses", `{"model":"m","background":true,"input":"hi"}`},
		{"stream as a string", OpenAIPath + "/chat/completions", `{"model":"m","stream":"true","messages":[{"role":"user","content":"hi"}]}`},
		{"stream as a number", OpenAIPath + "/chat/completions", `{"model":"m","stream":1,"messages":[{"role":"user","content":"hi"}]}`},
		{"not JSON (NaN)", OpenAIPath + "/chat/completions", `{"model":"m","stream":true,"temperature":NaN,"messages":[]}`},
		{"not an object", AnthropicPath + "/v1/messages", `[{"model":"m"}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Budget{})
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+Token(testSecret, "web:c1", gen))
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body := readAll(t, resp)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			require.Contains(t, body, "threadbox gateway")
			require.Empty(t, e.fake.Requests(), "nothing reached the upstream")
		})
	}
}
