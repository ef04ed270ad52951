package daytona

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/toolbox"
	"github.com/threadbox/threadbox/sandbox/internal/retryafter"
	"github.com/threadbox/threadbox/sandbox/internal/shellfs"
)

// TestListEndlessCursor: a listing whose next cursor never ends (the same cursor again, or a new one
// on every page), or whose pages are huge, ends in an error after a bounded number of pages and
// items instead of looping and growing the result forever.
func TestListEndlessCursor(t *testing.T) {
	item := `{"id":"x","organizationId":"o","user":"u","labels":{},"public":false,"networkBlockAll":false,` +
		`"target":"t","cpu":1,"gpu":0,"memory":1,"disk":1}`
	huge := strings.TrimSuffix(strings.Repeat(item+",", maxListItems/10+1), ",")
	for _, tc := range []struct {
		name, items, want string
		cursor            func(n int64) string
		maxPages          int64
	}{
		{"same cursor", "", "cursor", func(int64) string { return "again" }, 2},
		{"new cursor every page", "", "pages", func(n int64) string { return fmt.Sprint("c", n) }, maxListPages},
		{"huge pages", huge, "sandboxes", func(n int64) string { return fmt.Sprint("c", n) }, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pages atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := pages.Add(1)
				if n > 10_000 {
					http.Error(w, "test: runaway listing", http.StatusBadRequest) // ends the loop without the fix
					return
				}
				fmt.Fprintf(w, `{"items":[%s],"nextCursor":%q}`, tc.items, tc.cursor(n))
			}))
			t.Cleanup(srv.Close)
			p, err := New(Options{APIURL: srv.URL, APIKey: "k"})
			require.NoError(t, err)
			_, err = p.List(t.Context(), nil)
			require.ErrorContains(t, err, tc.want)
			require.LessOrEqual(t, pages.Load(), tc.maxPages)
		})
	}
}

// TestRetryAfterBounded: a Retry-After of days is not obeyed; the wait stays within retryafter.Max.
func TestRetryAfterBounded(t *testing.T) {
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"999999"}},
		Body: io.NopCloser(strings.NewReader(`{"message":"slow down"}`))}
	err := decode("get x", resp, nil)
	require.Equal(t, http.StatusTooManyRequests, statusOf(err))
	require.Equal(t, retryafter.Max, retryAfter(err))
	require.LessOrEqual(t, retryafter.Max, 30*time.Second)
}

// TestErrorMessageBounded: Daytona's message ends up in errors shown to users and logs; a message
// (or a validation list) of megabytes is cut, whatever field it came in.
func TestErrorMessageBounded(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	for name, body := range map[string]string{
		"message": fmt.Sprintf(`{"message":%q}`, huge),
		"error":   fmt.Sprintf(`{"error":%q}`, huge),
		"list":    fmt.Sprintf(`{"message":[%q,%q]}`, huge, huge),
		"raw":     huge,
	} {
		t.Run(name, func(t *testing.T) {
			resp := &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{},
				Body: io.NopCloser(bytes.NewReader([]byte(body)))}
			err := decode("create", resp, nil)
			require.Error(t, err)
			require.Less(t, len(err.Error()), 1024)
		})
	}
}

// TestLogsMessageBounded: the logs socket carries what the sandbox prints; one message past
// maxLogMessage ends the stream with an error instead of being read into memory whole.
func TestLogsMessageBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.BinaryMessage, bytes.Repeat([]byte("A"), maxLogMessage+1))
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		_, _, _ = ws.ReadMessage()
	}))
	t.Cleanup(srv.Close)
	p, err := New(Options{APIURL: srv.URL, APIKey: "k"})
	require.NoError(t, err)
	c, err := toolbox.NewClient(srv.URL)
	require.NoError(t, err)
	ws, err := p.followLogs(t.Context(), toolboxClient{c: c, base: srv.URL}, "s", "c")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.Close() })
	require.ErrorIs(t, demuxStream(ws, io.Discard, io.Discard), websocket.ErrReadLimit)
}

// TestToolboxIDEscaped: the sandbox id stays one path segment of the toolbox's base URL.
func TestToolboxIDEscaped(t *testing.T) {
	p, err := New(Options{APIURL: "https://app.proxy.invalid/api", APIKey: "k"})
	require.NoError(t, err)
	h := newHandle("a/../../b", handleState{Toolbox: "https://proxy.invalid/toolbox/"})
	tb, err := p.toolbox(t.Context(), h, handleState{Toolbox: "https://proxy.invalid/toolbox/"})
	require.NoError(t, err)
	require.Equal(t, "https://proxy.invalid/toolbox/a%2F..%2F..%2Fb", tb.base)
}

// TestToolboxURLTrusted: the toolbox URL comes from the API's answers, and every toolbox request
// carries the API key, so only a URL on the API's host or under its parent domain gets it.
func TestToolboxURLTrusted(t *testing.T) {
	for _, tc := range []struct {
		api, toolbox string
		ok           bool
	}{
		{DefaultAPIURL, "https://proxy.app.daytona.io/toolbox", true}, // Daytona Cloud
		{DefaultAPIURL, "https://app.daytona.io/toolbox", true},
		{DefaultAPIURL, "https://PROXY.App.Daytona.io./toolbox", true},
		{"https://daytona.example.com/api", "https://proxy.example.com/toolbox", true},
		{"http://127.0.0.1:3000/api", "http://127.0.0.1:3001/toolbox", true}, // a local install, the fake
		{DefaultAPIURL, "http://proxy.app.daytona.io/toolbox", false},        // the key in clear
		{DefaultAPIURL, "https://evil.example/toolbox", false},
		{DefaultAPIURL, "https://daytona.io.evil.example/toolbox", false},
		{DefaultAPIURL, "https://evildaytona.io/toolbox", false},
		{DefaultAPIURL, "https://user:pw@proxy.app.daytona.io/toolbox", false},
		{DefaultAPIURL, "ftp://proxy.app.daytona.io/toolbox", false},
		{DefaultAPIURL, "/toolbox", false},
		{DefaultAPIURL, "https://%zz/toolbox", false},
		{"http://127.0.0.1:3000/api", "http://127.0.0.2:3001/toolbox", false},
		{"http://127.0.0.1:3000/api", "http://0.0.1:3001/toolbox", false},
	} {
		err := toolboxTrusted(tc.api, tc.toolbox)
		require.Equal(t, tc.ok, err == nil, "%s with API %s: %v", tc.toolbox, tc.api, err)
		if err != nil {
			require.NotContains(t, err.Error(), "pw@", "the refusal quotes no credentials")
		}
	}
	// And the provider refuses before any request: the handle recorded a hostile URL.
	var hits atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(evil.Close)
	p, err := New(Options{APIURL: "http://api.invalid", APIKey: "k"})
	require.NoError(t, err)
	st := handleState{Toolbox: evil.URL}
	_, err = p.toolbox(t.Context(), newHandle("sb", st), st)
	require.ErrorContains(t, err, "not sending the API key")
	require.Zero(t, hits.Load())
}

// TestScriptErrBounded: a file script's output is the sandbox's (a listing that failed part way
// holds every entry so far); the error quoting it stays short.
func TestScriptErrBounded(t *testing.T) {
	for _, code := range []int{2, 3, 4, 1} {
		err := shellfs.ScriptErr("daytona", "list", "/w", strings.Repeat("entry\n", 1<<20), code, nil)
		require.Less(t, len(err.Error()), 1024, "exit %d", code)
	}
}

// TestAnswerOverCap: an answer past maxAnswer (a listing of long names from process/execute, a
// page of sandboxes) is refused as too large, not cut and then reported as undecodable JSON; a 2xx
// still counts as one Daytona acted on (a create is looked up, not retried).
func TestAnswerOverCap(t *testing.T) {
	big := `{"exitCode":0,"result":"` + strings.Repeat("x", maxAnswer) + `"}`
	resp := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(big))}
	var out struct {
		Result string `json:"result"`
	}
	err := decode("execute", resp, &out)
	require.ErrorIs(t, err, sandbox.ErrTooLarge)
	require.ErrorIs(t, err, errBadAnswer)
	require.Empty(t, out.Result)
	resp = &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(big))}
	require.NoError(t, decode("delete", resp, nil), "an answer nobody reads may be any size")

	ok := `{"exitCode":0,"result":"` + strings.Repeat("x", maxAnswer-100) + `"}`
	resp = &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(ok))}
	require.NoError(t, decode("execute", resp, &out))
	require.Len(t, out.Result, maxAnswer-100)
}
