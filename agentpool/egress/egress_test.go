package egress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/egress"
)

// fakeResolver answers from a table and fails for any other name: the tests send no DNS query. Like
// a stub resolver with "search corp.test" in resolv.conf, it tries a name that is not rooted (no
// final dot) under that search domain too.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	name, rooted := strings.CutSuffix(host, ".")
	if a, ok := f[name]; ok {
		return a, nil
	}
	if a, ok := f[name+".corp.test"]; ok && !rooted {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// counter is egress.Metrics.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Egress(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[result]++
}

func (c *counter) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		entry string
		err   string
	}{
		{entry: "registry.npmjs.org"},
		{entry: "*.github.com"},
		{entry: "git.example.com:8443"},
		{entry: "203.0.113.7"},
		{entry: "203.0.113.7:8080"},
		{entry: "[2001:db8::1]:443"},
		{entry: "10.0.0.0/8"},
		{entry: "Example.COM."},
		{entry: "", err: "empty"},
		{entry: "https://github.com", err: "not a URL"},
		{entry: "github.com/foo", err: "not a URL"},
		{entry: "github.com:0", err: "must be 1-65535"},
		{entry: "github.com:http", err: "must be 1-65535"},
		{entry: "*", err: "not a host name"},
		{entry: "a.*.com", err: "not a host name"},
		{entry: "user@host", err: "not a URL"},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			_, err := egress.ParsePolicy([]string{tc.entry})
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.ErrorContains(t, err, "sandbox.egress.allow", "the message names the key")
		})
	}
}

// rig is a proxy served on loopback TCP, with a stand-in for an allowlisted host ("mirror.test",
// resolving to a loopback HTTP server the allowlist names explicitly, as a test may).
type rig struct {
	proxy    *egress.Proxy
	proxyURL string
	mirror   *httptest.Server
	port     string // the mirror's port
	metrics  *counter
}

func newRig(t testing.TB, opts ...func(*egress.Config)) *rig {
	t.Helper()
	r := &rig{metrics: &counter{}}
	r.mirror = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, "mirror says hello to %s", req.Host)
	}))
	t.Cleanup(r.mirror.Close)
	u, _ := url.Parse(r.mirror.URL)
	r.port = u.Port()
	cfg := egress.Config{
		Allow: []string{"mirror.test:" + r.port, "127.0.0.1:" + r.port, "rebind.test", "hostaddr.test", "gone.test"},
		Resolver: fakeResolver{
			"mirror.test":   {netip.MustParseAddr("127.0.0.1")},
			"rebind.test":   {netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("10.0.0.5")},
			"hostaddr.test": {netip.MustParseAddr("8.8.4.4")},
		},
		// The host's own addresses, as the proxy would list them: a public one here, to show that
		// being public does not make the host reachable.
		HostAddrs: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("8.8.4.4")}, nil
		},
		Metrics: r.metrics,
	}
	for _, o := range opts {
		o(&cfg)
	}
	x, err := egress.New(cfg, zaptest.NewLogger(t))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = x.Serve(ln) }()
	t.Cleanup(func() { _ = x.Close() })
	r.proxy, r.proxyURL = x, "http://"+ln.Addr().String()
	return r
}

// get fetches target through the proxy as an http:// request in absolute form.
func (r *rig) get(t *testing.T, target string) (int, string) {
	t.Helper()
	pu, _ := url.Parse(r.proxyURL)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err := c.Get(target)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect opens a CONNECT tunnel to target and, when it is up, sends a GET through it.
func (r *rig) connect(t *testing.T, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(r.proxyURL, "http://"))
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
	inner, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer inner.Body.Close()
	b, _ := io.ReadAll(inner.Body)
	return inner.StatusCode, string(b)
}

func TestProxy(t *testing.T) {
	r := newRig(t)
	mirror := "mirror.test:" + r.port
	tests := []struct {
		name, target string
		status       int
		body         string
		result       string
	}{
		{"allowlisted name", mirror, 200, "mirror says hello to " + mirror, egress.ResultAllowed},
		{"allowlisted address, named explicitly", "127.0.0.1:" + r.port, 200, "mirror says hello", egress.ResultAllowed},
		{"off the allowlist", "example.com:80", 403, "not on the allowlist", egress.ResultRefusedHost},
		{"allowlisted host, other port", "mirror.test:1", 403, "not on the allowlist", egress.ResultRefusedHost},
		{"loopback, other port", "127.0.0.1:1", 403, "not on the allowlist", egress.ResultRefusedHost},
		{"metadata address", "169.254.169.254:80", 403, "not on the allowlist", egress.ResultRefusedHost},
		{"allowlisted name resolving to metadata and private", "rebind.test:80", 403,
			"169.254.169.254 is link-local (the cloud metadata address is one), 10.0.0.5 is private", egress.ResultRefusedAddress},
		{"allowlisted name resolving to the host", "hostaddr.test:443", 403, "8.8.4.4 is an address of the bot's host", egress.ResultRefusedAddress},
		{"allowlisted name that does not resolve", "gone.test:443", 502, "resolving gone.test", egress.ResultFailed},
	}
	for _, via := range []string{"http", "connect"} {
		for _, tc := range tests {
			t.Run(via+"/"+tc.name, func(t *testing.T) {
				before := r.metrics.get(tc.result)
				var status int
				var body string
				if via == "http" {
					status, body = r.get(t, "http://"+tc.target+"/")
				} else {
					status, body = r.connect(t, tc.target)
				}
				require.Equal(t, tc.status, status, body)
				require.Contains(t, body, tc.body)
				require.Equal(t, before+1, r.metrics.get(tc.result), "counted as %s", tc.result)
			})
		}
	}
}

func TestProxyRefusesOriginForm(t *testing.T) {
	r := newRig(t)
	resp, err := http.Get(r.proxyURL + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(b), "this is an HTTP proxy")
}

func TestAddrClass(t *testing.T) {
	host := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("8.8.4.4")}
	for _, tc := range []struct {
		addr, class string
	}{
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
		{"8.8.4.4", "an address of the bot's host"},
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"10.1.2.3", "private"},
		{"172.17.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fd00:ec2::254", "private"}, // the IPv6 metadata address of one cloud
		{"100.100.100.200", "reserved"},
		{"0.0.0.0", "not a unicast address"},
		{"224.0.0.1", "not a unicast address"},
		{"64:ff9b::a00:1", "reserved"},
		{"::127.0.0.1", "reserved"},        // IPv4-compatible (deprecated): embeds loopback
		{"::10.0.0.1", "reserved"},         // likewise, a private address
		{"::ffff:0:127.0.0.1", "reserved"}, // IPv4-translated (SIIT)
	} {
		t.Run(tc.addr, func(t *testing.T) {
			got := egress.AddrClass(netip.MustParseAddr(tc.addr), host)
			if tc.class == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tc.class)
		})
	}
}

// TestProxyBoundsOpenConnections: a sandbox with MaxConns tunnels open gets 429 for the next one.
func TestProxyBoundsOpenConnections(t *testing.T) {
	r := newRig(t, func(c *egress.Config) { c.MaxConns = 1 })
	c, err := net.Dial("tcp", strings.TrimPrefix(r.proxyURL, "http://"))
	require.NoError(t, err)
	defer c.Close()
	target := "mirror.test:" + r.port
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the first tunnel is up, and stays open")

	status, body := r.get(t, "http://"+target+"/")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Contains(t, body, "has 1 requests and tunnels open through the proxy already")
	require.Equal(t, 1, r.metrics.get(egress.ResultRefusedLimit))
}

// TestProxyAddressEntryKeepsItsPort: an address entry with a port opens that address on that port
// only, also when a name on the allowlist (here a wildcard, on another port) resolves to it.
func TestProxyAddressEntryKeepsItsPort(t *testing.T) {
	other, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nother")
			_ = c.Close()
		}
	}()
	_, otherPort, _ := net.SplitHostPort(other.Addr().String())
	r := newRig(t, func(c *egress.Config) {
		c.Allow = append(c.Allow, "*.wild.test:"+otherPort)
		c.Resolver = fakeResolver{
			"mirror.test": {netip.MustParseAddr("127.0.0.1")},
			"x.wild.test": {netip.MustParseAddr("127.0.0.1")},
		}
	})
	for _, tc := range []struct {
		name, target string
		status       int
		body, result string
	}{
		{"the entry's own port", "mirror.test:" + r.port, 200, "mirror says hello", egress.ResultAllowed},
		{"a name resolving to the address, another port", "x.wild.test:" + otherPort, 403,
			"127.0.0.1 is an address of the bot's host", egress.ResultRefusedAddress},
	} {
		for _, via := range []string{"http", "connect"} {
			t.Run(via+"/"+tc.name, func(t *testing.T) {
				before := r.metrics.get(tc.result)
				var status int
				var body string
				if via == "http" {
					status, body = r.get(t, "http://"+tc.target+"/")
				} else {
					status, body = r.connect(t, tc.target)
				}
				require.Equal(t, tc.status, status, body)
				require.Contains(t, body, tc.body)
				require.Equal(t, before+1, r.metrics.get(tc.result), "counted as %s", tc.result)
			})
		}
	}
}

// TestProxyReleasesTunnelOfGoneClient: a client that closes its tunnel gives its slot back, also when
// the host neither answers nor closes (the proxy sees the client's end only as EOF, and then waits at
// most Linger for the host).
func TestProxyReleasesTunnelOfGoneClient(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		_ = silent.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing, close nothing
			mu.Unlock()
		}
	}()
	_, silentPort, _ := net.SplitHostPort(silent.Addr().String())
	r := newRig(t, func(c *egress.Config) {
		c.MaxConns = 1
		c.Linger = 50 * time.Millisecond
		c.Allow = append(c.Allow, "127.0.0.1:"+silentPort)
	})
	target := "127.0.0.1:" + silentPort
	c, err := net.Dial("tcp", strings.TrimPrefix(r.proxyURL, "http://"))
	require.NoError(t, err)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, c.Close())

	pu, _ := url.Parse(r.proxyURL)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	require.Eventually(t, func() bool { // no require here: this runs off the test's goroutine
		resp, err := hc.Get("http://mirror.test:" + r.port + "/")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "the closed tunnel's slot is free again")
}

// TestProxyCloseEndsUpgradedRequests: Close ends every open connection, also a plain http:// request
// the host upgraded (a WebSocket, say), which the proxy relays outside the server's own connections.
func TestProxyCloseEndsUpgradedRequests(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = up.Close() })
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
				_, _ = io.Copy(io.Discard, c) // until the proxy closes its end
			}()
		}
	}()
	_, upPort, _ := net.SplitHostPort(up.Addr().String())
	r := newRig(t, func(c *egress.Config) { c.Allow = append(c.Allow, "127.0.0.1:"+upPort) })
	c, err := net.Dial("tcp", strings.TrimPrefix(r.proxyURL, "http://"))
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "GET http://127.0.0.1:%s/ HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n", upPort, upPort)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)

	require.NoError(t, r.proxy.Close())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second))) // a bound on failure, not a wait
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the upgraded connection ends with the proxy")
}

// A name a wildcard entry admits that does not exist must not resolve under the host's DNS search
// domains: with "search corp.test", nx.wild.test would become nx.wild.test.corp.test, a host the
// allowlist never named (here an address entry stands for the company service it finds). A name an
// entry spells out is the operator's and still resolves as the host resolves it.
func TestProxyLooksUpOnlyTheNameItChecked(t *testing.T) {
	var port string
	r := newRig(t, func(c *egress.Config) {
		c.Resolver = fakeResolver{
			"nx.wild.test.corp.test": {netip.MustParseAddr("127.0.0.1")},
			"registry.corp.test":     {netip.MustParseAddr("127.0.0.1")},
		}
		_, port, _ = net.SplitHostPort(c.Allow[1]) // 127.0.0.1:<the mirror's port>
		c.Allow = append(c.Allow, "*.wild.test:"+port, "registry:"+port)
	})
	for _, tc := range []struct {
		host, body string
		status     int
	}{
		{"nx.wild.test", "resolving nx.wild.test", http.StatusBadGateway},
		{"registry", "mirror says hello", http.StatusOK},
	} {
		for _, via := range []string{"http", "connect"} {
			t.Run(via+"/"+tc.host, func(t *testing.T) {
				var status int
				var body string
				if via == "http" {
					status, body = r.get(t, "http://"+tc.host+":"+port+"/")
				} else {
					status, body = r.connect(t, tc.host+":"+port)
				}
				require.Equal(t, tc.status, status, body)
				require.Contains(t, body, tc.body)
			})
		}
	}
}
