package daytonafake

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
)

// preview is the preview proxy: /preview/{port}-{sandboxId}/rest reaches port inside the sandbox
// (Daytona puts {port}-{sandboxId} in the host name instead). A private sandbox needs its current
// token in X-Daytona-Preview-Token or ?DAYTONA_SANDBOX_AUTH_KEY; otherwise the proxy answers 401.
func (f *Fake) preview(w http.ResponseWriter, r *http.Request) {
	portStr, id, ok := strings.Cut(r.PathValue("target"), "-")
	port, err := strconv.Atoi(portStr)
	if !ok || err != nil {
		http.Error(w, "bad preview target", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	b := f.boxes[id]
	var token string
	var h sandbox.Handle
	running := false
	if b != nil {
		token, h, running = b.previewToken, b.backend, b.state == api.SandboxStateStarted
	}
	f.mu.Unlock()
	switch {
	case b == nil:
		http.Error(w, "sandbox not found", http.StatusNotFound)
		return
	case r.Header.Get("X-Daytona-Preview-Token") != token && r.URL.Query().Get("DAYTONA_SANDBOX_AUTH_KEY") != token:
		http.Error(w, "invalid preview token", http.StatusUnauthorized)
		return
	case !running:
		http.Error(w, "sandbox is not running", http.StatusBadGateway)
		return
	}
	dialer, ok := f.opts.Backend.(sandbox.Dialer)
	if !ok {
		http.Error(w, "backend cannot dial", http.StatusNotImplemented)
		return
	}
	prefix := "/preview/" + r.PathValue("target")
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "127.0.0.1:" + portStr})
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
			pr.Out.URL.RawPath = ""
			pr.Out.Header.Del("X-Daytona-Preview-Token")
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.Dial(ctx, h, port)
			},
			DisableKeepAlives: true,
		},
		FlushInterval: -1, // stream (server-sent events)
	}
	proxy.ServeHTTP(w, r)
}
