package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

const (
	testSecret   = "test-secret-0123456789abcdef0123456789"
	anthropicKey = "sk-ant-REAL-KEY-never-in-a-sandbox"
	openAIKey    = "sk-oai-REAL-KEY-never-in-a-sandbox"
	// fakeTokens is what llmfake reports for every call: 10 in, 5 out.
	fakeTokens = 15
)

// env is a gateway in front of an in-process llmfake, on a SQLite store.
type env struct {
	g     *Gateway
	store db.Store
	fake  *llmfake.Server
	// url is the gateway's base URL (served over TCP here; sockets are tested apart).
	url string
	// upstreamURL is llmfake's.
	upstreamURL string
}

func newEnv(t testing.TB, budget Budget) *env {
	t.Helper()
	return newEnvPriced(t, budget, nil)
}

// newEnvPriced is newEnv with a price table.
func newEnvPriced(t testing.TB, budget Budget, prices Prices) *env {
	t.Helper()
	fake := llmfake.New(llmfake.Script{
		Rules:   []llmfake.Rule{{PromptContains: "HANG", Reply: llmfake.Reply{Hang: true}}},
		Default: &llmfake.Reply{Text: "hello there"},
	})
	up := httptest.NewServer(fake)
	t.Cleanup(func() { fake.Close(); up.Close() })
	store := dbtest.OpenSQLite(t)
	g, err := New(Config{
		Secret: testSecret, AnthropicURL: up.URL, OpenAIURL: up.URL + "/v1",
		AnthropicKey: anthropicKey, OpenAIKey: openAIKey, Budget: budget, Prices: prices, SocketDir: shortTempDir(t),
	}, store, zaptest.NewLogger(t))
	require.NoError(t, err)
	gw := httptest.NewServer(g)
	t.Cleanup(func() { gw.Close(); _ = g.Close() })
	return &env{g: g, store: store, fake: fake, url: gw.URL, upstreamURL: up.URL}
}

// session makes the thread's session active in its next generation and returns the generation.
func (e *env) session(t testing.TB, thread string) int64 {
	t.Helper()
	return e.sessionOn(t, thread, "docker")
}

// sessionOn is session with the thread's sandbox on provider.
func (e *env) sessionOn(t testing.TB, thread, provider string) int64 {
	t.Helper()
	ctx := t.Context()
	_, _, err := e.store.SessionCreate(ctx, db.NewSession{ThreadKey: thread, Platform: "web", Provider: provider, Runtime: "claude-code"})
	require.NoError(t, err)
	s, err := e.store.SessionTransition(ctx, thread, db.Transition{
		From: []db.SessionStatus{db.SessionCreating, db.SessionActive, db.SessionDestroyed}, To: db.SessionActive, BumpGeneration: true,
	})
	require.NoError(t, err)
	return s.Generation
}

// turn starts a turn of user in the thread and returns its id.
func (e *env) turn(t testing.TB, thread, user, event string) int64 {
	t.Helper()
	tr, err := e.store.TurnInsert(t.Context(), db.NewTurn{ThreadKey: thread, PlatformEventID: event, UserID: user, Prompt: "p"})
	require.NoError(t, err)
	_, err = e.store.TurnStart(t.Context(), tr.ID, "")
	require.NoError(t, err)
	return tr.ID
}

func (e *env) finish(t *testing.T, turnID int64) {
	t.Helper()
	_, err := e.store.TurnFinish(t.Context(), turnID, db.TurnResult{Status: db.TurnDone})
	require.NoError(t, err)
}

// A call in each API format, streamed or not.
type apiCall struct {
	name, path, header string
	body               func(prompt string, stream bool) string
}

var apiCalls = []apiCall{
	{"anthropic messages", AnthropicPath + "/v1/messages", "X-Api-Key", func(p string, s bool) string {
		return `{"model":"m","max_tokens":100,"stream":` + boolStr(s) + `,"messages":[{"role":"user","content":"` + p + `"}]}`
	}},
	{"openai chat", OpenAIPath + "/chat/completions", "Authorization", func(p string, s bool) string {
		return `{"model":"m","stream":` + boolStr(s) + `,"messages":[{"role":"user","content":"` + p + `"}]}`
	}},
	{"openai responses", OpenAIPath + "/responses", "Authorization", func(p string, s bool) string {
		return `{"model":"m","stream":` + boolStr(s) + `,"input":"` + p + `"}`
	}},
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// do sends one call with tok the way the SDK of its API would.
func (e *env) do(ctx context.Context, t *testing.T, c apiCall, tok, prompt string, stream bool) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+c.path, strings.NewReader(c.body(prompt, stream)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if c.header == "X-Api-Key" {
		req.Header.Set("X-Api-Key", tok)
	} else {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func usageOf(t *testing.T, s db.Store, turnID int64) string {
	t.Helper()
	tr, err := s.TurnGet(t.Context(), turnID)
	require.NoError(t, err)
	return string(bytes.TrimSpace(tr.Usage))
}

// shortTempDir is a temporary directory with a short path: a unix socket's path must stay under
// ~108 bytes, which t.TempDir's long names can break.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "tbgw")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func readAllDiscard(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}
