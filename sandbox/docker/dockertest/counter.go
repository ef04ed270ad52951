package dockertest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/docker/docker/client"

	"github.com/threadbox/threadbox/sandbox/docker"
)

// Counter counts the requests a provider made of the engine and the bytes of the engine's answers,
// so that a test can assert what an operation costs in daemon calls and in transfer.
type Counter struct {
	mu    sync.Mutex // protects the following
	calls []string   // "GET /v1.51/containers/…/archive"
	bytes int64
}

// Calls returns the requests made since the last Reset, as "METHOD path".
func (c *Counter) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// Bytes returns the bytes of answer bodies read from the engine since the last Reset.
func (c *Counter) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Reset starts counting afresh.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls, c.bytes = nil, 0
}

// NewCounted is New with every request going through a proxy on a unix socket that counts them.
// opts.Host (default: DOCKER_HOST, else the local socket) is the engine behind the proxy; it must
// be a unix socket or plain tcp.
func NewCounted(t testing.TB, opts docker.Options) (*docker.Provider, *Counter) {
	t.Helper()
	host := opts.Host
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = client.DefaultDockerHost
	}
	u, err := client.ParseHostURL(host)
	if err != nil || (u.Scheme != "unix" && u.Scheme != "tcp") || os.Getenv("DOCKER_TLS_VERIFY") != "" {
		t.Fatalf("dockertest: the counting proxy needs an engine on a unix socket or plain tcp, not %q (%v)", host, err)
	}
	addr := u.Host // the socket's path, for unix
	// A short directory of its own: a unix socket's path is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "dkc")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c := &Counter{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			c.mu.Lock()
			c.calls = append(c.calls, r.In.Method+" "+r.In.URL.Path)
			c.mu.Unlock()
			r.SetURL(&url.URL{Scheme: "http", Host: "docker"})
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, u.Scheme, addr)
		}},
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode != http.StatusSwitchingProtocols {
				res.Body = &countingBody{ReadCloser: res.Body, c: c}
			}
			return nil
		},
	}
	srv := &http.Server{Handler: proxy}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = os.RemoveAll(dir)
	})
	opts.Host = "unix://" + sock
	return New(t, opts), c
}

type countingBody struct {
	io.ReadCloser
	c *Counter
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	b.c.bytes += int64(n)
	b.c.mu.Unlock()
	return n, err
}
