package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

func localEnv(t *testing.T, extra ...string) []string {
	return baseEnv(t, append([]string{"THREADBOX_SANDBOX_PROVIDER=local",
		"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true", "THREADBOX_SANDBOX_LOCAL_DIR=" + t.TempDir()}, extra...)...)
}

// TestServeRefusesTheLocalProviderBeyondLoopback: the local provider gives every user a shell on this
// host, so serve refuses it, in one line, whenever anyone but the person at this machine could reach it.
func TestServeRefusesTheLocalProviderBeyondLoopback(t *testing.T) {
	slack := []string{"THREADBOX_SLACK_BOT_TOKEN=xoxb-configured-token", "THREADBOX_SLACK_SIGNING_SECRET=signing-secret-value"}
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"Slack configured", localEnv(t, append(slack, "THREADBOX_HTTP_ADDR=127.0.0.1:0")...), "because slack.bot_token is set"},
		{"Discord configured", localEnv(t, "THREADBOX_DISCORD_BOT_TOKEN=discord-token-value", "THREADBOX_HTTP_ADDR=127.0.0.1:0"),
			"because discord.bot_token is set"},
		{"web chat beyond loopback", localEnv(t, "THREADBOX_HTTP_ADDR=0.0.0.0:0"), "because http.addr 0.0.0.0:0 is not loopback"},
		{"auto does not fall back to it", baseEnv(t, append(slack, "THREADBOX_SANDBOX_PROVIDER=auto",
			"THREADBOX_SANDBOX_DOCKER_HOST=unix:///nonexistent/docker.sock",
			"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true")...), "no Docker daemon answers, and the local provider"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runMain(t, tc.env, "serve")
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), "start Docker")
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// TestServeLoginLink is make run's console line: serve --login-link prints the address to open with a
// one-time token in it; the first browser to open it is web:local (without loopback trust), and the
// link is spent.
func TestServeLoginLink(t *testing.T) {
	var stdout, stderr lockedBuffer
	m := NewMain(&stdout, &stderr, localEnv(t, "THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_ADMIN_USERS=web:local"))
	addrc := make(chan string, 1)
	m.OnListen = func(a string) { addrc <- a }
	require.NoError(t, m.ParseFlags([]string{"serve", "--login-link"}))
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- m.Run(ctx) }()
	addr := <-addrc

	link := regexp.MustCompile(`Open the web chat: (http://\S+/\?login=\S+)`).FindStringSubmatch(stderr.String())
	require.NotNil(t, link, "the link is on the console: %s", stderr.String())
	require.Contains(t, link[1], "http://"+addr+"/?login=")

	me := func(c *http.Client) (int, string) {
		res, err := c.Get("http://" + addr + "/api/me")
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, _ := me(http.DefaultClient)
	require.Equal(t, http.StatusUnauthorized, code, "loopback is not trusted by default")

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	res, err := browser.Get(link[1])
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "redirected to the page")
	code, body := me(browser)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"actor":"web:local"`)
	require.Contains(t, body, `"admin":true`)

	res, err = http.Get(link[1])
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the link is spent")
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, m.Close())
}

// TestServePublicAddrCarriesOnlyWebhooks: with http.public_addr, the Slack webhooks and health checks
// answer there, and the web chat and admin API do not; the web chat stays on http.addr.
func TestServePublicAddrCarriesOnlyWebhooks(t *testing.T) {
	requireServices(t)
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	opts := fake.Options()
	public := freeAddr(t)
	sv := serveInProcess(t, baseEnv(t,
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true", "THREADBOX_HTTP_PUBLIC_ADDR="+public,
		"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_IMAGE=threadbox/sandbox-test:latest",
		"THREADBOX_SLACK_BOT_TOKEN="+opts.BotToken, "THREADBOX_SLACK_SIGNING_SECRET="+opts.SigningSecret,
		"THREADBOX_SLACK_API_URL="+fake.APIURL(), "THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s"))
	status := func(method, url string) int {
		req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	res, err := fake.URLVerification(t.Context(), "http://"+public+"/slack/events", "challenge-value")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status, "Slack's events reach the public listener")
	require.Equal(t, http.StatusOK, status("GET", "http://"+public+"/healthz"))
	require.Equal(t, http.StatusNotFound, status("GET", "http://"+public+"/"), "no web chat on the public listener")
	require.Equal(t, http.StatusNotFound, status("GET", "http://"+public+"/api/admin/sessions"), "no admin API either")
	require.Equal(t, http.StatusOK, status("GET", "http://"+sv.addr+"/api/me"), "the web chat is on http.addr")
	sv.cancel()
	require.NoError(t, <-sv.done)
	require.NoError(t, sv.m.Close())
}

// freeAddr returns a loopback address nothing listens on (the OS's pick, released at once).
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// lockedBuffer is an io.Writer the test may read while serve's goroutines write to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeBehindAReverseProxy is the Security issue's acceptance through serve's wiring: with loopback
// trusted (as make run sets it), a request through httputil.ReverseProxy with default settings on this
// machine is not web:local, and gets 401 without the token.
func TestServeBehindAReverseProxy(t *testing.T) {
	sv := serveInProcess(t, localEnv(t, "THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true",
		"THREADBOX_HTTP_TOKEN=proxy-test-web-token", "THREADBOX_ADMIN_USERS=web:local"))
	target, err := url.Parse("http://" + sv.addr)
	require.NoError(t, err)
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()
	get := func(base, path, token string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := get("http://"+sv.addr, "/api/me", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"actor":"web:local"`, "direct on loopback")
	for _, path := range []string{"/api/me", "/api/admin/sessions", "/"} {
		code, body = get(proxy.URL, path, "")
		require.Equal(t, http.StatusUnauthorized, code, "%s through the proxy: %s", path, body)
	}
	code, body = get(proxy.URL, "/api/me", "proxy-test-web-token")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"actor":"web:token"`)
	sv.cancel()
	require.NoError(t, <-sv.done)
	require.NoError(t, sv.m.Close())
}
