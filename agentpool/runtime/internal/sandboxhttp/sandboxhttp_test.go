package sandboxhttp

import (
	"context"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
)

// dialBox is a sandbox whose every port is one local test server.
type dialBox struct{ addr string }

var _ sandbox.Sandbox = dialBox{}

func (b dialBox) Handle() sandbox.Handle { return sandbox.Handle{Provider: "test", ID: "box"} }
func (b dialBox) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, sandbox.ErrUnsupported
}
func (b dialBox) WriteFile(context.Context, string, []byte, fs.FileMode) error {
	return sandbox.ErrUnsupported
}
func (b dialBox) ReadFile(context.Context, string, int64) ([]byte, error) {
	return nil, sandbox.ErrUnsupported
}
func (b dialBox) ListFiles(context.Context, string) ([]sandbox.FileInfo, error) {
	return nil, sandbox.ErrUnsupported
}
func (b dialBox) ReadTree(context.Context, string, sandbox.TreeLimits) (sandbox.Tree, error) {
	return sandbox.Tree{}, sandbox.ErrUnsupported
}
func (b dialBox) Dial(ctx context.Context, _ int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", b.addr)
}

func TestDoBoundsTheAnswer(t *testing.T) {
	// {"text":"xxxx…"} of exactly 100 bytes, without a newline.
	body := `{"text":"` + strings.Repeat("x", 100-len(`{"text":""}`)) + `"}`
	require.Len(t, body, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	sb := dialBox{addr: srv.Listener.Addr().String()}

	tests := []struct {
		name    string
		max     int64
		wantErr error
	}{
		{"a body of exactly the cap", 100, nil},
		{"one byte over", 99, sandbox.ErrTooLarge},
		{"far over", 10, sandbox.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Clients{MaxBody: tt.max}
			req, err := NewRequest(t.Context(), http.MethodGet, "http://box/x", nil)
			require.NoError(t, err)
			var out struct{ Text string }
			status, err := c.Do(sb, req, &out)
			require.Equal(t, http.StatusOK, status)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.Len(t, out.Text, 100-len(`{"text":""}`))
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.Equal(t, runtime.ClassFatal, runtime.Classify(err), "a retry would meet the same answer")
		})
	}
}

func TestDoDefaultCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`"`))
		chunk := []byte(strings.Repeat("y", 1<<20))
		for range MaxBodyBytes>>20 + 1 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"`))
	}))
	defer srv.Close()
	req, err := NewRequest(t.Context(), http.MethodGet, "http://box/x", nil)
	require.NoError(t, err)
	var out string
	_, err = (&Clients{}).Do(dialBox{addr: srv.Listener.Addr().String()}, req, &out)
	require.ErrorIs(t, err, sandbox.ErrTooLarge)
	require.Empty(t, out)
}

// TestDoSaysWhetherTheRequestWentOut: a call whose connection is cut after the server read the
// request may have been acted on (ErrSentUnanswered, beside ErrSandboxDown); one that never reached
// a server (nothing listens) surely was not.
func TestDoSaysWhetherTheRequestWentOut(t *testing.T) {
	read := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read <- struct{}{}
		conn, _, err := http.NewResponseController(w).Hijack()
		require.NoError(t, err)
		_ = conn.Close() // cut, no answer
	}))
	defer srv.Close()
	c := &Clients{}
	req, err := NewRequest(t.Context(), http.MethodPost, "http://box/prompt", map[string]string{"text": "hi"})
	require.NoError(t, err)
	_, err = c.Do(dialBox{addr: srv.Listener.Addr().String()}, req, nil)
	<-read
	require.ErrorIs(t, err, runtime.ErrSandboxDown)
	require.ErrorIs(t, err, ErrSentUnanswered)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: connection refused
	req, err = NewRequest(t.Context(), http.MethodPost, "http://box/prompt", map[string]string{"text": "hi"})
	require.NoError(t, err)
	_, err = (&Clients{}).Do(dialBox{addr: addr}, req, nil)
	require.ErrorIs(t, err, runtime.ErrSandboxDown)
	require.NotErrorIs(t, err, ErrSentUnanswered)
}
