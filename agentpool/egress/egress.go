// Package egress is restricted egress (sandbox.network: restricted, DESIGN §7): an HTTP proxy in the
// bot that lets a sandbox reach the hosts of an allowlist and nothing else.
//
// A Docker sandbox keeps network none. Like the model gateway, the proxy listens on a unix socket in
// a per-sandbox host directory bind-mounted into the sandbox, and the in-sandbox forwarder (package
// agentpool/gateway/forward) relays 127.0.0.1:<port> to it; HTTP_PROXY and HTTPS_PROXY point there.
// A process that ignores them has no network at all, so the proxy is the only way out, not a
// convention.
//
// The proxy serves CONNECT (https, and any TLS protocol) and absolute-form http:// requests. For
// each it checks the target host and port against the allowlist, resolves the name itself, and
// dials only addresses that are public: loopback, private, link-local (the cloud metadata address
// 169.254.169.254), reserved ranges and the bot host's own addresses are refused unless an
// allowlist entry names the address or its range. It dials the address it checked, so a name that
// resolves differently on a second lookup (DNS rebinding) gains nothing.
package egress

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/internal/sandboxsock"
)

// Paths and ports inside a sandbox.
const (
	// SandboxDir is where the per-sandbox host directory (the proxy's socket) is mounted, read-only.
	SandboxDir = "/run/threadbox-egress"
	// ForwarderPath is where the forwarder binary is mounted; the model gateway mounts it at the same
	// path, and when it does, its forwarder also relays egress.
	ForwarderPath = "/opt/threadbox/forward"
	// DefaultPort is the proxy's port on the sandbox's loopback.
	DefaultPort = 18081
	socketName  = "egress.sock"
)

// Results counted by Metrics.Egress.
const (
	ResultAllowed        = "allowed"
	ResultRefusedHost    = "refused_host"    // the host or port is not on the allowlist
	ResultRefusedAddress = "refused_address" // the name resolves only to addresses a sandbox may not reach
	ResultFailed         = "failed"          // allowed, but the name did not resolve or the host did not answer
	ResultRefusedLimit   = "refused_limit"   // the sandbox has MaxConns requests and tunnels open already
)

// DefaultMaxConns bounds one sandbox's open requests and tunnels: the proxy's sockets and file
// descriptors are the bot's, shared by every sandbox.
const DefaultMaxConns = 256

// Metrics counts the proxy's requests by result.
type Metrics interface {
	Egress(result string)
}

// Resolver looks names up (net.DefaultResolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures the proxy.
type Config struct {
	// Allow is the allowlist (see ParsePolicy). Empty: every request is refused.
	Allow []string
	// SocketDir holds one directory per sandbox (its socket), bind-mounted into it. It must be an
	// absolute path on the Docker daemon's host, short enough for a socket path (~80 bytes).
	SocketDir string
	// Forwarder is the static forwarder binary on the host, mounted into sandboxes whose main process
	// is not already the gateway's forwarder; ForwarderArgs come before its flags.
	Forwarder     string
	ForwarderArgs []string
	// Port is the proxy's port on the sandbox's loopback (default DefaultPort).
	Port int
	// Resolver resolves names (default net.DefaultResolver).
	Resolver Resolver
	// HostAddrs lists the bot host's own addresses, refused whatever the allowlist says about names
	// (default: the addresses of this machine's interfaces, read per connection).
	HostAddrs func() ([]netip.Addr, error)
	// DialTimeout bounds resolving and connecting (default 30 s).
	DialTimeout time.Duration
	// MaxConns bounds one sandbox's open requests and tunnels (default DefaultMaxConns).
	MaxConns int
	// Linger bounds how long a tunnel whose client has finished sending (or has gone: the proxy
	// cannot tell the two apart) waits for the host's next byte (default 30 s).
	Linger  time.Duration
	Metrics Metrics
}

// Proxy is the egress proxy. It is safe for concurrent use.
type Proxy struct {
	cfg    Config
	policy *Policy
	log    *zap.Logger
	rp     *httputil.ReverseProxy
	srv    *http.Server
	dialer net.Dialer

	// socks are the per-sandbox sockets.
	socks *sandboxsock.Set

	// stop cancels every request's context: Close ends the plain http:// requests whose connection
	// the host upgraded, which the server no longer owns.
	stop context.CancelFunc

	mu sync.Mutex // protects the following
	// tunnels are the open CONNECT connections (both ends), closed by Close.
	tunnels map[net.Conn]struct{}
	// open counts each sandbox's open requests and tunnels (connections on no sandbox's socket count
	// under the zero ident).
	open   map[ident]int
	closed bool
}

type ctxKey int

const ctxIdent ctxKey = iota

// New validates cfg and returns a proxy that serves nothing until Provider or Handler is used.
func New(cfg Config, log *zap.Logger) (*Proxy, error) {
	pol, err := ParsePolicy(cfg.Allow)
	if err != nil {
		return nil, err
	}
	cfg.Port = cmp.Or(cfg.Port, DefaultPort)
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, 30*time.Second)
	cfg.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)
	cfg.Linger = cmp.Or(cfg.Linger, 30*time.Second)
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.HostAddrs == nil {
		cfg.HostAddrs = InterfaceAddrs
	}
	x := &Proxy{
		cfg: cfg, policy: pol, log: cmp.Or(log, zap.NewNop()).Named("egress"),
		tunnels: map[net.Conn]struct{}{}, open: map[ident]int{},
	}
	if cfg.Forwarder != "" {
		if x.cfg.Forwarder, err = sandboxsock.InstallForwarder("egress", cfg.SocketDir, cfg.Forwarder); err != nil {
			return nil, err
		}
	}
	x.rp = &httputil.ReverseProxy{
		// The request is already absolute-form (http://host/path): it goes where it says.
		Rewrite: func(pr *httputil.ProxyRequest) { pr.Out.Host = pr.In.Host },
		Transport: &http.Transport{
			Proxy:                 nil, // never the bot's own proxy settings: the check is ours
			DialContext:           x.dial,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   30 * time.Second,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true, // bodies pass as they are
		},
		FlushInterval: -1,
		ModifyResponse: func(*http.Response) error {
			x.count(ResultAllowed)
			return nil
		},
		ErrorHandler: x.proxyError,
		ErrorLog:     zap.NewStdLog(x.log),
	}
	base, stop := context.WithCancel(context.Background())
	x.stop = stop
	x.srv = &http.Server{
		Handler:           x,
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: time.Minute,
		ConnContext:       x.connContext,
		ErrorLog:          zap.NewStdLog(x.log),
	}
	// The "e" keeps the directories apart from the gateway's when both share a parent.
	x.socks = sandboxsock.New(sandboxsock.Options{Root: cfg.SocketDir, Prefix: "e", Socket: socketName,
		Name: "egress", Server: x.srv, Log: x.log})
	return x, nil
}

// Port is the proxy's port on a sandbox's loopback.
func (x *Proxy) Port() int { return x.cfg.Port }

// Policy is the parsed allowlist.
func (x *Proxy) Policy() *Policy { return x.policy }

// URL is the proxy as a sandbox's HTTP_PROXY names it.
func (x *Proxy) URL() string { return "http://127.0.0.1:" + strconv.Itoa(x.cfg.Port) }

// Close stops every per-sandbox listener and every open connection. The socket directories stay:
// the sandboxes still mount them, and the next process listens there again.
func (x *Proxy) Close() error {
	x.socks.Close()
	x.stop()
	x.mu.Lock()
	x.closed = true
	for c := range x.tunnels {
		_ = c.Close()
	}
	x.mu.Unlock()
	return x.srv.Close()
}

// Serve serves the proxy on ln until the proxy is closed. Connections on ln belong to no sandbox;
// Provider serves each sandbox's own socket.
func (x *Proxy) Serve(ln net.Listener) error { return x.srv.Serve(ln) }

func (x *Proxy) connContext(ctx context.Context, c net.Conn) context.Context {
	if id, ok := x.socks.Owner(c.LocalAddr().String()); ok {
		ctx = context.WithValue(ctx, ctxIdent, id)
	}
	return ctx
}

func threadOf(ctx context.Context) string {
	id, _ := ctx.Value(ctxIdent).(ident)
	return id.Thread
}

// RefusedError is a request the policy refused. Its text is what the sandbox reads.
type RefusedError struct {
	Target string
	// Result is ResultRefusedHost or ResultRefusedAddress.
	Result string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("threadbox egress: %s refused: %s", e.Target, e.Reason)
}

// ServeHTTP implements http.Handler: CONNECT tunnels and absolute-form http:// requests.
func (x *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, _ := r.Context().Value(ctxIdent).(ident)
	if !x.acquire(id) {
		x.refuse(w, r, &RefusedError{Target: r.Host, Result: ResultRefusedLimit,
			Reason: fmt.Sprintf("this sandbox has %d requests and tunnels open through the proxy already", x.cfg.MaxConns)})
		return
	}
	if r.Method == http.MethodConnect {
		// The tunnel, once up, releases its slot when it ends.
		if !x.connect(w, r, func() { x.release(id) }) {
			x.release(id)
		}
		return
	}
	defer x.release(id)
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "threadbox egress: this is an HTTP proxy: send http:// URLs in absolute form, or CONNECT host:port for https "+
			"(HTTP_PROXY and HTTPS_PROXY are set in the sandbox)", http.StatusBadRequest)
		return
	}
	target := r.URL.Host
	if r.URL.Port() == "" {
		target = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	if err := x.checkTarget(target); err != nil {
		x.refuse(w, r, err)
		return
	}
	x.rp.ServeHTTP(w, r)
}

// connect serves CONNECT host:port: dial (checked), answer 200, then relay bytes both ways. It
// reports whether the tunnel started; done runs when a started tunnel ends.
func (x *Proxy) connect(w http.ResponseWriter, r *http.Request, done func()) bool {
	target := r.Host
	up, err := x.dial(r.Context(), "tcp", target)
	if err != nil {
		x.refuse(w, r, err)
		return false
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "threadbox egress: CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return false
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return false
	}
	if !x.track(client, up) {
		_ = client.Close()
		_ = up.Close()
		return false
	}
	x.count(ResultAllowed)
	x.log.Debug("egress tunnel", zap.String("thread", threadOf(r.Context())), zap.String("target", target))
	go func() {
		defer done()
		x.relay(client, buf, up)
	}()
	return true
}

func (x *Proxy) acquire(id ident) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.open[id] >= x.cfg.MaxConns {
		return false
	}
	x.open[id]++
	return true
}

func (x *Proxy) release(id ident) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.open[id]--; x.open[id] <= 0 {
		delete(x.open, id)
	}
}

// relay copies both ways until either side ends, then closes both.
func (x *Proxy) relay(client net.Conn, buf *bufio.ReadWriter, up net.Conn) {
	defer x.untrack(client, up)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	var clientDone atomic.Bool
	go func() {
		// What the client sent after the CONNECT header is in buf already.
		_, _ = io.Copy(up, buf.Reader)
		closeWrite(up)
		// The client has finished sending, or has gone (a closed socket reads the same). A host that
		// then neither answers nor closes would hold the tunnel, and the sandbox's slot, for good:
		// from now on the host has Linger for each next byte.
		clientDone.Store(true)
		_ = up.SetReadDeadline(time.Now().Add(x.cfg.Linger))
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, &lingerReader{Conn: up, done: &clientDone, linger: x.cfg.Linger})
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
}

// lingerReader reads the host's side of a tunnel, extending the read deadline by linger after each
// read once the client is done.
type lingerReader struct {
	net.Conn
	done   *atomic.Bool
	linger time.Duration
}

func (l *lingerReader) Read(p []byte) (int, error) {
	n, err := l.Conn.Read(p)
	if n > 0 && l.done.Load() {
		_ = l.Conn.SetReadDeadline(time.Now().Add(l.linger))
	}
	return n, err
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

func (x *Proxy) track(cs ...net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	for _, c := range cs {
		x.tunnels[c] = struct{}{}
	}
	return true
}

func (x *Proxy) untrack(cs ...net.Conn) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(x.tunnels, c)
	}
}

// checkTarget is the allowlist check on host:port, before any lookup.
func (x *Proxy) checkTarget(target string) error {
	host, port, err := splitTarget(target)
	if err != nil {
		return &RefusedError{Target: target, Result: ResultRefusedHost, Reason: err.Error()}
	}
	if !x.policy.allowsTarget(host, port) {
		return &RefusedError{Target: target, Result: ResultRefusedHost,
			Reason: "not on the allowlist (sandbox.egress.allow); only the model gateway and the listed hosts are reachable"}
	}
	return nil
}

func splitTarget(target string) (string, uint16, error) {
	host, p, err := net.SplitHostPort(target)
	if err != nil {
		return "", 0, fmt.Errorf("not host:port")
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("port %q is not a port", p)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, fmt.Errorf("no host")
	}
	return host, uint16(n), nil
}

// dial checks target against the allowlist, resolves it, keeps the addresses a sandbox may reach,
// and connects to the first that answers. Every refusal is a *RefusedError.
func (x *Proxy) dial(ctx context.Context, _, target string) (net.Conn, error) {
	if err := x.checkTarget(target); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, x.cfg.DialTimeout)
	defer cancel()
	host, port, _ := splitTarget(target)
	addrs := []netip.Addr(nil)
	if a, ok := parseAddr(host); ok {
		addrs = []netip.Addr{a}
	} else {
		got, err := x.cfg.Resolver.LookupNetIP(ctx, "ip", x.lookupName(host, port))
		if err != nil {
			return nil, fmt.Errorf("threadbox egress: resolving %s: %w", host, err)
		}
		addrs = got
	}
	own, err := x.cfg.HostAddrs()
	if err != nil {
		// Without the host's addresses the check would be incomplete: refuse rather than guess.
		return nil, fmt.Errorf("threadbox egress: listing this host's addresses: %w", err)
	}
	var ok []netip.Addr
	var why []string
	for _, a := range addrs {
		a = a.Unmap()
		if class := addrClass(a, own); class != "" && !x.policy.names(a, port) {
			why = append(why, a.String()+" is "+class)
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		reason := "it resolves to no address"
		if len(why) > 0 {
			reason = strings.Join(why, ", ") + "; a sandbox reaches only public addresses, or addresses an allowlist entry names"
		}
		return nil, &RefusedError{Target: target, Result: ResultRefusedAddress, Reason: reason}
	}
	var errs []error
	for _, a := range ok {
		c, err := x.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("threadbox egress: connecting to %s: %w", target, errors.Join(errs...))
}

// lookupName is the name dial resolves for host. A name a wildcard entry admitted is the sandbox's
// choice, so it is rooted (a final dot): otherwise a name that does not exist would be tried under
// the bot host's DNS search domains (resolv.conf's search and ndots) and find a host the allowlist
// never named (nx.example.com becoming nx.example.com.corp.internal). A name an entry spells out is
// the operator's, resolved as the host resolves it (a short name completed by a search domain, one
// from /etc/hosts).
func (x *Proxy) lookupName(host string, port uint16) string {
	if x.policy.spells(host, port) {
		return host
	}
	return host + "."
}

// refuse answers a request the proxy could not serve: 403 for a policy refusal (429 over the
// sandbox's connection bound), 502 otherwise, with
// the reason in the body (a CONNECT client shows the status; curl and git print it).
func (x *Proxy) refuse(w http.ResponseWriter, r *http.Request, err error) {
	target, thread := r.Host, threadOf(r.Context())
	var re *RefusedError
	if errors.As(err, &re) {
		x.count(re.Result)
		x.log.Warn("egress refused", zap.String("thread", thread), zap.String("method", r.Method),
			zap.String("target", target), zap.String("reason", re.Reason))
		w.Header().Set("X-Threadbox-Egress", "refused")
		status := http.StatusForbidden
		if re.Result == ResultRefusedLimit {
			status = http.StatusTooManyRequests
		}
		http.Error(w, re.Error(), status)
		return
	}
	x.count(ResultFailed)
	x.log.Info("egress failed", zap.String("thread", thread), zap.String("target", target), zap.Error(err))
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// proxyError is the reverse proxy's error handler (the dial's refusal, or an upstream failure).
func (x *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	x.refuse(w, r, err)
}

func (x *Proxy) count(result string) {
	if x.cfg.Metrics != nil {
		x.cfg.Metrics.Egress(result)
	}
}

// InterfaceAddrs lists the addresses of this machine's network interfaces.
func InterfaceAddrs() ([]netip.Addr, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ifAddrs))
	for _, a := range ifAddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}
