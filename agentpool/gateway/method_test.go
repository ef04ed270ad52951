package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyModelMethodsPass: the real key opens more than model calls on the same paths. OpenAI's
// DELETE /v1/models/{id} deletes the account's fine-tuned model, and GET /v1/chat/completions lists
// the completions stored by every user of the account; a sandbox must reach neither. A model call is
// a POST, a listing a GET.
func TestOnlyModelMethodsPass(t *testing.T) {
	tests := []struct {
		method, path, header string
		status               int
	}{
		{http.MethodDelete, OpenAIPath + "/models/ft:gpt-4o:acme::abc", "Authorization", http.StatusMethodNotAllowed},
		{http.MethodGet, OpenAIPath + "/chat/completions", "Authorization", http.StatusMethodNotAllowed},
		{http.MethodGet, OpenAIPath + "/responses", "Authorization", http.StatusMethodNotAllowed},
		{http.MethodPut, AnthropicPath + "/v1/messages", "X-Api-Key", http.StatusMethodNotAllowed},
		{http.MethodDelete, AnthropicPath + "/v1/models/claude-x", "X-Api-Key", http.StatusMethodNotAllowed},
		{http.MethodPost, OpenAIPath + "/models", "Authorization", http.StatusMethodNotAllowed},
		{http.MethodGet, OpenAIPath + "/models/m", "Authorization", 0},
		{http.MethodGet, AnthropicPath + "/v1/models", "X-Api-Key", 0},
		{http.MethodPost, AnthropicPath + "/v1/messages/count_tokens", "X-Api-Key", 0},
		{http.MethodGet, AnthropicPath + "/v1/messages/count_tokens", "X-Api-Key", http.StatusMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			e := newEnv(t, Budget{})
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			req, err := http.NewRequestWithContext(t.Context(), tc.method, e.url+tc.path, strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			tok := Token(testSecret, "web:c1", gen)
			if tc.header == "X-Api-Key" {
				req.Header.Set("X-Api-Key", tok)
			} else {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body := readAll(t, resp)
			if tc.status == 0 {
				require.NotEmpty(t, e.fake.Requests(), "a listing passes: %s", body)
				return
			}
			require.Equal(t, tc.status, resp.StatusCode, body)
			require.Contains(t, body, "not a model API")
			require.Empty(t, e.fake.Requests(), "nothing reached the upstream")
		})
	}
}
