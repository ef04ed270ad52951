package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerToolsThatFetchURLsAreRefused: a sandbox with no network must not reach other hosts
// through the model API either. Anthropic's MCP connector (mcp_servers) and web_fetch tool, and the
// Responses API's mcp tool, have the provider connect to a URL the agent names: a way out for
// anything the agent read in the sandbox. Ordinary tools (run by the agent) and web search pass.
func TestServerToolsThatFetchURLsAreRefused(t *testing.T) {
	tests := []struct {
		name, path, body string
		refused          bool
	}{
		{"anthropic mcp connector", AnthropicPath + "/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"mcp_servers":[{"type":"url","url":"https://evil.example/mcp","name":"x"}]}`, true},
		{"anthropic web fetch", AnthropicPath + "/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}`, true},
		{"responses mcp tool", OpenAIPath + "/responses", `{"model":"m","input":"hi","tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.example/mcp"}]}`, true},
		{"anthropic client tool", AnthropicPath + "/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"bash","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"}]}`, false},
		{"responses function tool", OpenAIPath + "/responses", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{}}]}`, false},
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
			if !tc.refused {
				require.Len(t, e.fake.Requests(), 1, body)
				return
			}
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			require.Contains(t, body, "threadbox gateway")
			require.Empty(t, e.fake.Requests(), "nothing reached the upstream")
		})
	}
}
