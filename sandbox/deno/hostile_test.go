package deno

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// TestHostEscapes: a region and a sandbox id come from the console's answers and go into the
// sandbox host's URL, which carries our token. A region that is no DNS label must not move the
// request (and the token) to another host, and an id must stay one path segment.
func TestHostEscapes(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	p, err := New(Options{Token: "ddo_x", SandboxURL: srv.URL + "/{region}", ConsoleURL: srv.URL})
	require.NoError(t, err)

	require.NoError(t, p.kill(t.Context(), "ord", "../../v2/volumes/x?all=1"), "404: gone")
	mu.Lock()
	require.Equal(t, []string{"/ord/api/v3/sandbox/..%2F..%2Fv2%2Fvolumes%2Fx%3Fall=1?"}, seen)
	seen = nil
	mu.Unlock()

	for _, region := range []string{"evil.example#", "x@evil.example", "a/b", "ORD", "", strings.Repeat("a", 64)} {
		err := p.kill(t.Context(), region, "sb1")
		require.ErrorContains(t, err, "region", "%q", region)
	}
	mu.Lock()
	require.Empty(t, seen, "no request with a hostile region")
	mu.Unlock()
}

// TestAPIErrorBounded: Deno's error text reaches logs and chat threads; megabytes of it are cut.
func TestAPIErrorBounded(t *testing.T) {
	huge := strings.Repeat("y", 1<<20)
	for name, body := range map[string]string{
		"message": fmt.Sprintf(`{"code":"BAD","message":%q}`, huge),
		"code":    fmt.Sprintf(`{"code":%q,"message":"m"}`, huge),
		"raw":     huge,
	} {
		t.Run(name, func(t *testing.T) {
			require.Less(t, len(apiErr("get", http.StatusBadRequest, []byte(body)).Error()), 1024)
		})
	}
}

// rpcServer answers the first call on a socket with answer(id).
func rpcServer(t *testing.T, answer func(id int64) []byte) (*Provider, *rpcConn) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, http.Header{"x-deno-sandbox-id": {"sb1"}})
		if err != nil {
			return
		}
		defer ws.Close()
		var req struct {
			ID int64 `json:"id"`
		}
		if ws.ReadJSON(&req) != nil {
			return
		}
		_ = ws.WriteMessage(websocket.TextMessage, answer(req.ID))
		_, _, _ = ws.ReadMessage() // hold the socket until the client drops it
	}))
	t.Cleanup(srv.Close)
	p, err := New(Options{Token: "ddo_x", SandboxURL: srv.URL, ConsoleURL: srv.URL})
	require.NoError(t, err)
	c, err := p.dialRPC(t.Context(), "connect", "ws"+strings.TrimPrefix(srv.URL, "http"), http.Header{})
	require.NoError(t, err)
	t.Cleanup(c.close)
	return p, c
}

// TestRPCErrorBounded: a JSON-RPC error, or an error thrown in the sandbox, is cut before it goes
// into our error.
func TestRPCErrorBounded(t *testing.T) {
	huge := strings.Repeat("z", 1<<20)
	for name, format := range map[string]string{
		"json-rpc": `{"id":%d,"error":{"code":1,"message":"%s"}}`,
		"thrown":   `{"id":%d,"result":{"error":{"constructorName":"NotFound","message":"%s"}}}`,
		"ctor":     `{"id":%d,"result":{"error":{"constructorName":"%s","message":"m"}}}`,
		"code":     `{"id":%d,"result":{"error":{"constructorName":"E","message":"m","code":"%s"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, c := rpcServer(t, func(id int64) []byte { return fmt.Appendf(nil, format, id, huge) })
			err := c.call(t.Context(), "readFile", map[string]string{"path": "/x"}, nil, nil)
			require.Error(t, err)
			require.Less(t, len(err.Error()), 1024)
			var re *RemoteError
			if errors.As(err, &re) {
				require.Less(t, len(re.Code), 1024)
			}
		})
	}
}

// TestRPCMessageBounded: what comes over the sandbox's socket is the sandbox's to choose (a file it
// grew after the size check, a flood of output): one message past maxRPCMessage ends the connection
// instead of being read into memory whole.
func TestRPCMessageBounded(t *testing.T) {
	_, c := rpcServer(t, func(id int64) []byte {
		return fmt.Appendf(nil, `{"id":%d,"result":"%s"}`, id, strings.Repeat("A", maxRPCMessage))
	})
	var got string
	err := c.call(t.Context(), "readFile", map[string]string{"path": "/x"}, &got, nil)
	require.ErrorIs(t, err, errConnLost)
	require.Empty(t, got)
}

// TestListAllHostile: a console listing whose Link repeats the cursor ends at once, and one whose
// pages hold more items than a deployment could have ends in an error instead of growing.
func TestListAllHostile(t *testing.T) {
	for _, tc := range []struct {
		name      string
		items     int
		fresh     bool // a new cursor every page
		maxCalls  int64
		errSubstr string
	}{
		{"repeated cursor", 1, false, 2, "cursor"},
		{"huge pages", maxListItems/10 + 1, true, 10, "items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			page := "[" + strings.TrimSuffix(strings.Repeat(`{"slug":"x"},`, tc.items), ",") + "]"
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				if n > 2000 {
					http.Error(w, `{"code":"STOP","message":"runaway"}`, http.StatusBadRequest)
					return
				}
				cursor := "same"
				if tc.fresh {
					cursor = fmt.Sprint("c", n)
				}
				w.Header().Set("Link", `<https://console.invalid/api/v2/volumes?cursor=`+cursor+`>; rel="next"`)
				_, _ = io.WriteString(w, page)
			}))
			t.Cleanup(srv.Close)
			p, err := New(Options{Token: "ddo_x", SandboxURL: srv.URL, ConsoleURL: srv.URL})
			require.NoError(t, err)
			_, err = listAll[volumeRec](t.Context(), p, "list volumes", "/api/v2/volumes", url.Values{"limit": {"100"}})
			require.ErrorContains(t, err, tc.errSubstr)
			require.LessOrEqual(t, calls.Load(), tc.maxCalls)
		})
	}
}

// TestListTrustsNoFilter: what List returns is what the reaper destroys. A console that ignores
// the labels filter or the slug search must not hand us another deployment's boxes.
func TestListTrustsNoFilter(t *testing.T) {
	now := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	theirs := newBoxID("theirs", now)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v2/sandboxes":
			fmt.Fprintf(w, `[{"id":"sb1","region":"ord","status":"running","labels":{%q:%q,%q:"theirs"}}]`,
				LabelBox, theirs, sandbox.LabelDeployment)
		case "/api/v2/volumes":
			fmt.Fprintf(w, `[{"slug":%q,"is_bootable":true}]`, volSlug(theirs, 1))
		default:
			_, _ = io.WriteString(w, `[]`)
		}
	}))
	t.Cleanup(srv.Close)
	p, err := New(Options{Token: "ddo_x", SandboxURL: srv.URL, ConsoleURL: srv.URL})
	require.NoError(t, err)
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: "ours"})
	require.NoError(t, err)
	require.Empty(t, list)
}

// TestSandboxListPastLimit: Deno's sandbox list is one unpaged array (cloud-apis.md §2.2); an answer
// past maxAnswer is reported as too large (sandbox.ErrTooLarge, saying why), not as JSON cut short.
func TestSandboxListPastLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v2/sandboxes" {
			_, _ = io.WriteString(w, `[]`)
			return
		}
		_, _ = io.WriteString(w, `[`)
		rec := `{"id":"sb","region":"ord","status":"stopped","labels":{"threadbox.deployment":"ours"}}`
		for i := 0; i <= maxAnswer/len(rec); i++ {
			_, _ = io.WriteString(w, rec+",")
		}
		_, _ = io.WriteString(w, rec+`]`)
	}))
	t.Cleanup(srv.Close)
	p, err := New(Options{Token: "ddo_x", SandboxURL: srv.URL, ConsoleURL: srv.URL})
	require.NoError(t, err)
	_, err = p.List(t.Context(), map[string]string{sandbox.LabelDeployment: "ours"})
	require.ErrorIs(t, err, sandbox.ErrTooLarge)
	require.ErrorContains(t, err, "not paged")
}
