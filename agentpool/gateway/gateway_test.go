package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// TestProxyEachAPI: a call in each format, streamed and not, reaches the upstream with the real key
// in place of the sandbox token, comes back whole, and its usage is added to the running turn.
func TestProxyEachAPI(t *testing.T) {
	for _, c := range apiCalls {
		for _, stream := range []bool{true, false} {
			t.Run(c.name+map[bool]string{true: " stream", false: ""}[stream], func(t *testing.T) {
				e := newEnv(t, Budget{})
				gen := e.session(t, "web:c1")
				turnID := e.turn(t, "web:c1", "U1", "ev1")
				tok := Token(testSecret, "web:c1", gen)

				resp := e.do(t.Context(), t, c, tok, "hi", stream)
				body := readAll(t, resp)
				require.Equal(t, http.StatusOK, resp.StatusCode, body)
				require.Contains(t, body, "hello")

				reqs := e.fake.Requests()
				require.Len(t, reqs, 1)
				h := reqs[0].Header
				if c.header == "X-Api-Key" {
					require.Equal(t, anthropicKey, h.Get("X-Api-Key"))
					require.Empty(t, h.Get("Authorization"))
				} else {
					require.Equal(t, "Bearer "+openAIKey, h.Get("Authorization"))
					require.Empty(t, h.Get("X-Api-Key"))
				}
				require.NotContains(t, string(reqs[0].Body), tok)
				require.JSONEq(t, `{"input_tokens":10,"output_tokens":5,"cost_micros":0}`, usageOf(t, e.store, turnID))
			})
		}
	}
}

// TestChatStreamAsksForUsage: a streamed chat completion gets stream_options.include_usage, which
// OpenAI needs to report usage at all; the caller's other options are kept.
func TestChatStreamAsksForUsage(t *testing.T) {
	e := newEnv(t, Budget{})
	gen := e.session(t, "web:c1")
	e.turn(t, "web:c1", "U1", "ev1")
	c := apiCall{"chat", OpenAIPath + "/chat/completions", "Authorization", func(p string, s bool) string {
		return `{"model":"m","stream":true,"stream_options":{"x":1},"messages":[{"role":"user","content":"hi"}]}`
	}}
	readAll(t, e.do(t.Context(), t, c, Token(testSecret, "web:c1", gen), "hi", true))
	require.JSONEq(t, `{"x":1,"include_usage":true}`, string(mustField(t, e.fake.Requests()[0].Body, "stream_options")))
}

// TestRefusals: each reason to refuse a call gives its status, in the API's error format, and nothing
// reaches the upstream.
func TestRefusals(t *testing.T) {
	anthropic := apiCalls[0]
	tests := []struct {
		name   string
		setup  func(t *testing.T, e *env) (tok string, c apiCall)
		status int
		msg    string
	}{
		{"no token", func(t *testing.T, e *env) (string, apiCall) {
			e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return "", anthropic
		}, http.StatusUnauthorized, "invalid gateway token"},
		{"real key instead of a token", func(t *testing.T, e *env) (string, apiCall) {
			e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return anthropicKey, anthropic
		}, http.StatusUnauthorized, "invalid gateway token"},
		{"other secret", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return Token("another-secret", "web:c1", gen), anthropic
		}, http.StatusUnauthorized, "invalid gateway token"},
		{"old generation (recreated)", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return Token(testSecret, "web:c1", gen), apiCalls[1]
		}, http.StatusUnauthorized, "token revoked"},
		{"destroyed sandbox", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			_, err := e.store.SessionTransition(t.Context(), "web:c1", db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionDestroyed})
			require.NoError(t, err)
			return Token(testSecret, "web:c1", gen), anthropic
		}, http.StatusUnauthorized, "token revoked"},
		{"unknown thread", func(t *testing.T, e *env) (string, apiCall) {
			return Token(testSecret, "web:nobody", 1), anthropic
		}, http.StatusUnauthorized, "token revoked"},
		{"no running turn", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.finish(t, e.turn(t, "web:c1", "U1", "ev1"))
			return Token(testSecret, "web:c1", gen), anthropic
		}, http.StatusConflict, "no turn is running"},
		{"not a model API", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return Token(testSecret, "web:c1", gen), apiCall{"files", OpenAIPath + "/files", "Authorization", anthropic.body}
		}, http.StatusNotFound, "not a model API"},
		// The upstream resolves dot segments: /v1/models/../files is its /v1/files, which the real
		// key opens.
		{"dot segments below models (openai)", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return Token(testSecret, "web:c1", gen), apiCall{"files", OpenAIPath + "/models/../files", "Authorization", anthropic.body}
		}, http.StatusNotFound, "not a model API"},
		{"dot segments below models (anthropic)", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return Token(testSecret, "web:c1", gen), apiCall{"files", AnthropicPath + "/v1/models/../files", "X-Api-Key", anthropic.body}
		}, http.StatusNotFound, "not a model API"},
		{"escaped dot segments", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return Token(testSecret, "web:c1", gen), apiCall{"files", AnthropicPath + "/v1/models/%2e%2e/%2E%2E/v1/files", "X-Api-Key", anthropic.body}
		}, http.StatusNotFound, "not a model API"},
		{"escaped slash in a model id", func(t *testing.T, e *env) (string, apiCall) {
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			return Token(testSecret, "web:c1", gen), apiCall{"files", OpenAIPath + "/models/..%2Ffiles", "Authorization", anthropic.body}
		}, http.StatusNotFound, "not a model API"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Budget{})
			tok, c := tc.setup(t, e)
			resp := e.do(t.Context(), t, c, tok, "hi", true)
			body := readAll(t, resp)
			require.Equal(t, tc.status, resp.StatusCode, body)
			require.Contains(t, body, tc.msg)
			if c.header == "X-Api-Key" {
				require.Contains(t, body, `"type":"error"`, "Anthropic's error format")
			} else {
				require.Contains(t, body, `{"error":{`, "OpenAI's error format")
			}
			require.Empty(t, e.fake.Requests(), "nothing reached the upstream")
		})
	}
}

// TestBudgets: a call is let through while the thread, the user today and the deployment today are
// under their caps; the one after the cap is crossed is refused with the budget message, and the
// refusal is kept for the runtime wrapper.
func TestBudgets(t *testing.T) {
	tests := []struct {
		name   string
		budget Budget
		// sameUser and otherUser spend a call first, in another thread: by the same user, or another.
		sameUser, otherUser bool
		scope               BudgetScope
	}{
		{"thread", Budget{ThreadTokens: fakeTokens}, false, false, ScopeThread},
		{"user per day", Budget{UserDailyTokens: fakeTokens}, true, false, ScopeUser},
		{"deployment per day", Budget{DailyTokens: fakeTokens}, false, true, ScopeDay},
	}
	anthropic := apiCalls[0]
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.budget)
			spend := func(thread, user, event string) {
				gen := e.session(t, thread)
				id := e.turn(t, thread, user, event)
				resp := e.do(t.Context(), t, anthropic, Token(testSecret, thread, gen), "hi", true)
				body := readAll(t, resp)
				require.Equal(t, http.StatusOK, resp.StatusCode, body)
				e.finish(t, id)
			}
			if tc.sameUser {
				spend("web:other", "U1", "ev0")
			}
			if tc.otherUser {
				spend("web:other", "U2", "ev0")
			}
			gen := e.session(t, "web:c1")
			tok := Token(testSecret, "web:c1", gen)
			e.turn(t, "web:c1", "U1", "ev1")
			if tc.scope == ScopeThread {
				resp := e.do(t.Context(), t, anthropic, tok, "hi", true)
				require.Equal(t, http.StatusOK, resp.StatusCode, "under the cap")
				readAll(t, resp)
			}
			resp := e.do(t.Context(), t, anthropic, tok, "hi", true)
			body := readAll(t, resp)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
			require.Contains(t, body, "permission_error")
			be := e.g.takeRefusal("web:c1")
			require.NotNil(t, be)
			require.Equal(t, tc.scope, be.Scope)
			require.ErrorIs(t, be, ErrBudget)
			require.Contains(t, body, be.Error())
		})
	}
}

// TestStreamPassesThroughAndCancels: the first bytes of a stream reach the client while the upstream
// is still answering (no buffering), and a client that goes away cancels the upstream call.
func TestStreamPassesThroughAndCancels(t *testing.T) {
	for _, c := range apiCalls {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Budget{})
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			resp := e.do(ctx, t, c, Token(testSecret, "web:c1", gen), "HANG please", true)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			// The fake streams a first text delta, then holds the call open: seeing it proves the
			// gateway flushed mid-stream.
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				if strings.Contains(line, "Working") {
					break
				}
			}
			cancel()
			_ = resp.Body.Close()
			require.Eventually(t, func() bool {
				reqs := e.fake.Requests()
				return len(reqs) == 1 && reqs[0].Cancelled
			}, 10*time.Second, 10*time.Millisecond, "the upstream call was cancelled")
		})
	}
}

func mustField(t *testing.T, raw []byte, field string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[field]
}

// TestMoneyBudgets: with a price table, each call's cost is recorded on its turn, and a money budget
// per user or per day refuses the call after the one that reached it, in the table's currency.
func TestMoneyBudgets(t *testing.T) {
	// llmfake's answer is 10 input and 5 output tokens: 10×3 + 5×15 = 105 millionths.
	const cost = 10*3 + 5*15
	prices := Prices{"m": {Input: 3, Output: 15}}
	tests := []struct {
		name   string
		budget Budget
		scope  BudgetScope
	}{
		{"user per day", Budget{UserDailyMicros: cost}, ScopeUser},
		{"deployment per day", Budget{DailyMicros: cost}, ScopeDay},
	}
	anthropic := apiCalls[0]
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvPriced(t, tc.budget, prices)
			gen := e.session(t, "web:c1")
			tok := Token(testSecret, "web:c1", gen)
			id := e.turn(t, "web:c1", "U1", "ev1")
			resp := e.do(t.Context(), t, anthropic, tok, "hi", true)
			require.Equal(t, http.StatusOK, resp.StatusCode, "under the cap")
			readAll(t, resp)
			require.JSONEq(t, `{"input_tokens":10,"output_tokens":5,"cost_micros":105}`, usageOf(t, e.store, id))

			resp = e.do(t.Context(), t, anthropic, tok, "hi", true)
			body := readAll(t, resp)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
			be := e.g.takeRefusal("web:c1")
			require.NotNil(t, be)
			require.Equal(t, BudgetError{Scope: tc.scope, Limit: cost, Used: cost, Money: true, Currency: "USD"}, *be)
			require.Contains(t, body, be.Error(), "the agent's model client is told why")
		})
	}
}

func TestPricesLookup(t *testing.T) {
	p := Prices{
		"claude-sonnet-4-5": {Input: 3}, "claude-sonnet*": {Input: 2}, "gpt-5": {Input: 1.25}, "gpt-4.1": {Input: 2.5},
		"o3": {Input: 2}, "*": {Input: 9},
	}
	tests := []struct {
		model string
		want  float64
	}{
		{"claude-sonnet-4-5", 3},
		{"claude-sonnet-4-5-20250929", 3},      // a dated snapshot of a priced model
		{"claude-sonnet-4-5@20250929", 3},      // Vertex's form
		{"claude-sonnet-4-5-20250929-v1:0", 3}, // a provider's tail after the date
		{"claude-sonnet-4-0", 2},               // the family, priced on purpose with "claude-sonnet*"
		{"gpt-4.1-2025-04-14", 2.5},            // a dashed date
		{"gpt-5", 1.25},                        // exact
		{"gpt-5-pro", 9},                       // not a snapshot of gpt-5: "*"
		{"o3-pro", 9},                          // nor of o3, many times dearer
		{"o3-pro-2025-06-10", 9},               // a snapshot of o3-pro, which is not priced
		{"gpt-5-latest", 1.25},                 // an alias of the newest snapshot
		{"gpt-5-20250807x", 9},                 // not a date
		{"anthropic.claude-sonnet-4-5", 9},     // keys are not suffixes
		{"o4", 9},                              // "*"
	}
	for _, tc := range tests {
		got, ok := p.Lookup(tc.model)
		require.True(t, ok, tc.model)
		require.Equal(t, tc.want, got.Input, tc.model)
	}
	_, ok := Prices{"gpt-5": {}}.Lookup("o3")
	require.False(t, ok, "no \"*\": unpriced")
	require.Equal(t, int64(105), Price{Input: 3, Output: 15}.CostMicros(Usage{Input: 10, Output: 5}))
	// Odd prices never make a negative or wrapped cost, which would lower the money totals.
	require.Equal(t, int64(0), Price{Input: math.NaN()}.CostMicros(Usage{Input: 10}))
	require.Equal(t, int64(0), Price{Input: -3}.CostMicros(Usage{Input: 10}))
	require.Equal(t, maxCallMicros, Price{Input: math.Inf(1)}.CostMicros(Usage{Input: 10}))
	require.Equal(t, maxCallMicros, Price{Input: 1e300}.CostMicros(Usage{Input: maxCallTokens}))
}

// TestCallsInFlightPerThread: one thread cannot hold more than maxCallsPerThread calls open at once
// (each may buffer a large body in the bot); another thread is not affected, and slots come back.
func TestCallsInFlightPerThread(t *testing.T) {
	e := newEnv(t, Budget{})
	anthropic := apiCalls[0]
	gen := e.session(t, "web:c1")
	e.turn(t, "web:c1", "U1", "ev1")
	tok := Token(testSecret, "web:c1", gen)
	ctx, cancel := context.WithCancel(t.Context())
	var held []*http.Response
	for range maxCallsPerThread {
		resp := e.do(ctx, t, anthropic, tok, "HANG please", true)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		held = append(held, resp)
	}
	resp := e.do(t.Context(), t, anthropic, tok, "hi", true)
	body := readAll(t, resp)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	require.Contains(t, body, "in flight")

	other := e.session(t, "web:c2")
	e.turn(t, "web:c2", "U1", "ev2")
	resp = e.do(t.Context(), t, anthropic, Token(testSecret, "web:c2", other), "hi", true)
	require.Equal(t, http.StatusOK, resp.StatusCode, "another thread is not affected")
	readAll(t, resp)

	cancel()
	for _, r := range held {
		_, _ = readAllDiscard(r)
	}
	require.Eventually(t, func() bool {
		e.g.mu.Lock()
		defer e.g.mu.Unlock()
		return e.g.inFlight["web:c1"] == 0
	}, 10*time.Second, 5*time.Millisecond, "the held calls' slots are released")
	resp = e.do(t.Context(), t, anthropic, tok, "hi", true)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the slots came back")
	readAll(t, resp)
}

// TestAccountHeadersAreNotForwarded: the real key's account is the bot's to choose; headers that
// pick another organization or project of it (billed and budgeted there), or carry other credentials,
// do not reach the upstream from a sandbox.
func TestAccountHeadersAreNotForwarded(t *testing.T) {
	for _, c := range apiCalls {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Budget{})
			gen := e.session(t, "web:c1")
			e.turn(t, "web:c1", "U1", "ev1")
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+c.path, strings.NewReader(c.body("hi", false)))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			tok := Token(testSecret, "web:c1", gen)
			if c.header == "X-Api-Key" {
				req.Header.Set("X-Api-Key", tok)
			} else {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			for _, h := range []string{"OpenAI-Organization", "OpenAI-Project", "Cookie", "Proxy-Authorization"} {
				req.Header.Set(h, "other")
			}
			req.Header.Set("Anthropic-Version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body := readAll(t, resp)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			reqs := e.fake.Requests()
			require.Len(t, reqs, 1)
			for _, h := range []string{"OpenAI-Organization", "OpenAI-Project", "Cookie", "Proxy-Authorization"} {
				require.Empty(t, reqs[0].Header.Get(h), h)
			}
			require.Equal(t, "2023-06-01", reqs[0].Header.Get("Anthropic-Version"), "API headers still pass")
		})
	}
}

// TestAnswerOverTheLimitIsRefusedWhole: a non-streamed answer past the gateway's read limit is a
// 502 that says so, not the answer cut short (which the agent would read as broken JSON).
func TestAnswerOverTheLimitIsRefusedWhole(t *testing.T) {
	old := maxJSONBody
	maxJSONBody = 16
	t.Cleanup(func() { maxJSONBody = old })
	e := newEnv(t, Budget{})
	gen := e.session(t, "web:c1")
	e.turn(t, "web:c1", "U1", "ev1")
	resp := e.do(t.Context(), t, apiCalls[0], Token(testSecret, "web:c1", gen), "hi", false)
	body := readAll(t, resp)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	require.Contains(t, body, "over the gateway's limit")
}
