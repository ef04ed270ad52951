// Package forward is the in-sandbox side of the model gateway: a small reverse proxy on the sandbox's
// loopback that sends every request to the gateway's unix socket (bind-mounted from the host), with
// the sandbox's token in place of whatever key the runtime sent. It runs as the sandbox's main
// process, built static (CGO_ENABLED=0), so it needs nothing from the image.
package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"time"
)

// Options say where to listen and where the gateway is.
type Options struct {
	// Listen is the TCP address to serve ("127.0.0.1:18080").
	Listen string
	// Socket is the gateway's unix socket.
	Socket string
	// TokenFile holds the sandbox token. It is read per request: the bot rewrites it when the service
	// secret changes, and the forwarder outlives bot restarts.
	TokenFile string
	// EgressListen and EgressSocket, when set, relay a second loopback port byte for byte to the
	// egress proxy's unix socket (restricted egress, package agentpool/egress). With Socket empty the
	// forwarder serves egress alone.
	EgressListen, EgressSocket string
}

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	gateway := o.Socket != ""
	egress := o.EgressListen != "" || o.EgressSocket != ""
	switch {
	case gateway && (o.Listen == "" || o.TokenFile == ""):
		return errors.New("forward: -listen, -socket and -token-file are required")
	case egress && (o.EgressListen == "" || o.EgressSocket == ""):
		return errors.New("forward: -egress-listen and -egress-socket go together")
	case !gateway && !egress:
		return errors.New("forward: nothing to forward: set -socket (the model gateway) or -egress-socket (restricted egress)")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	n := 0
	if egress {
		ln, err := net.Listen("tcp", o.EgressListen)
		if err != nil {
			return fmt.Errorf("forward: %w", err)
		}
		n++
		go func() { errc <- Relay(ctx, ln, o.EgressSocket) }()
	}
	if gateway {
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			cancel()
			if n > 0 {
				<-errc
			}
			return fmt.Errorf("forward: %w", err)
		}
		n++
		go func() {
			srv := &http.Server{Handler: Handler(o), ReadHeaderTimeout: time.Minute}
			stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
			defer stop()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("forward: %w", err)
				return
			}
			errc <- nil
		}()
	}
	// The first to end (ctx, or a failure) ends both: the sandbox's main process exits, and the
	// next turn resumes the sandbox with both running again.
	err := <-errc
	cancel()
	for range n - 1 {
		err = errors.Join(err, <-errc)
	}
	return err
}

// maxBody bounds a request body (model calls are JSON, megabytes at most).
const maxBody = 64 << 20

// Handler is the forwarding proxy. Request bodies are read whole first: a model call is useless
// upstream until complete, and streaming the incoming body through a reverse proxy cut about one
// streamed answer in a thousand under load.
func Handler(o Options) http.Handler {
	proxy := newProxy(o)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		_ = r.Body.Close()
		if err != nil || len(body) > maxBody {
			http.Error(w, "threadbox forwarder: request body unreadable or over 64 MiB", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		proxy.ServeHTTP(w, r)
	})
}

func newProxy(o Options) http.Handler {
	dialer := &net.Dialer{}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "gateway"
			pr.Out.Header.Del("X-Api-Key")
			pr.Out.Header.Del("Authorization")
			if tok, err := os.ReadFile(o.TokenFile); err == nil {
				pr.Out.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
			}
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, "unix", o.Socket)
			},
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     time.Minute,
			// Bodies pass as they are: the runtime asked for what it can read.
			DisableCompression: true,
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, `{"type":"error","error":{"type":"api_error","message":"threadbox forwarder: the gateway is not reachable: %s"}}`+"\n",
				strings.ReplaceAll(err.Error(), `"`, `'`))
		},
	}
}
