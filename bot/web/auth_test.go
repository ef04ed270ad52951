package web

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

// nopHandler accepts every message and answers nothing.
type nopHandler struct{}

func (nopHandler) Handle(context.Context, bot.Message, bot.Replier) error { return nil }

// req builds a request as the server would see it: arriving on the listener at local, from remote,
// for host.
func req(method, target, local, remote, host string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	la, _ := net.ResolveTCPAddr("tcp", local)
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, la))
	r.RemoteAddr, r.Host = remote, host
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

func loopbackReq(method, target string, body io.Reader) *http.Request {
	return req(method, target, "127.0.0.1:8080", "127.0.0.1:50000", "127.0.0.1:8080", body)
}

// remoteReq arrives on a public listener from another machine (only ever simulated here).
func remoteReq(method, target string, body io.Reader) *http.Request {
	return req(method, target, "192.0.2.1:8080", "198.51.100.7:50000", "bot.example:8080", body)
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func newTestServer(t *testing.T, token string) *Server {
	t.Helper()
	return newTestServerWith(t, Options{Token: token, TrustLoopback: true})
}

func newTestServerWith(t *testing.T, o Options) *Server {
	t.Helper()
	o.Handler, o.Directory, o.Warning = nopHandler{}, bot.NewDirectory(newStore(t)), "no isolation <b>here</b>"
	srv, err := New(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func TestLoopbackNeedsNoToken(t *testing.T) {
	srv := newTestServer(t, "")
	rec := serve(srv, loopbackReq("GET", "/api/me", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"actor":"web:local"`)

	// The page: embedded, the warning escaped and prominent, a strict CSP, no external URL.
	rec = serve(srv, loopbackReq("GET", "/", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	page := rec.Body.String()
	require.Contains(t, page, `id="warning"`)
	require.Contains(t, page, "no isolation &lt;b&gt;here&lt;/b&gt;")
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "default-src 'none'")
	for _, asset := range []string{"/", "/static/app.js", "/static/style.css"} {
		rec := serve(srv, loopbackReq("GET", asset, nil))
		require.Equal(t, http.StatusOK, rec.Code, asset)
		require.NotRegexp(t, `(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`, rec.Body.String(), "%s has no external URL", asset)
	}
}

func TestNotLoopbackWithoutToken(t *testing.T) {
	srv := newTestServer(t, "")
	for _, r := range []*http.Request{
		remoteReq("GET", "/", nil),
		remoteReq("GET", "/api/conversations", nil),
		// A proxy on this machine forwarding someone else's request.
		func() *http.Request {
			r := loopbackReq("GET", "/api/me", nil)
			r.Header.Set("X-Forwarded-For", "198.51.100.7")
			return r
		}(),
		// DNS rebinding: a foreign name resolved to 127.0.0.1.
		func() *http.Request { r := loopbackReq("GET", "/api/me", nil); r.Host = "evil.example:8080"; return r }(),
		// A wildcard listener: the peer is remote even if the browser says localhost.
		req("GET", "/api/me", "0.0.0.0:8080", "198.51.100.7:1", "localhost:8080", nil),
	} {
		rec := serve(srv, r)
		require.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s", r.Host, r.Header)
		require.Contains(t, rec.Body.String(), "set http.token")
	}
}

func TestTokenOffLoopback(t *testing.T) {
	const token = "s3cret-token"
	srv := newTestServer(t, token)

	rec := serve(srv, remoteReq("GET", "/api/me", nil))
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.Equal(t, `Bearer realm="threadbox"`, rec.Header().Get("WWW-Authenticate"))
	require.Contains(t, rec.Body.String(), "?token=")

	for _, bad := range []string{"Bearer wrong", "Bearer " + token + "x", "Basic " + token, token, "Bearer "} {
		r := remoteReq("GET", "/api/me", nil)
		r.Header.Set("Authorization", bad)
		require.Equal(t, http.StatusUnauthorized, serve(srv, r).Code, bad)
	}
	r := remoteReq("GET", "/api/me", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	rec = serve(srv, r)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"actor":"web:token"`)
	require.Contains(t, rec.Body.String(), `"loopback":false`)

	// The query token is only for the page, which trades it for a cookie and drops it from the URL.
	require.Equal(t, http.StatusUnauthorized, serve(srv, remoteReq("GET", "/api/me?token="+token, nil)).Code)
	require.Equal(t, http.StatusUnauthorized, serve(srv, remoteReq("GET", "/?token=nope", nil)).Code)
	rec = serve(srv, remoteReq("GET", "/?token="+token, nil))
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, "/", rec.Header().Get("Location"))
	cookies := rec.Result().Cookies()
	require.Len(t, cookies, 1)
	ck := cookies[0]
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.NotContains(t, ck.Value, token, "the cookie is derived from the token, not the token")

	withCookie := func(r *http.Request) *http.Request { r.AddCookie(ck); return r }
	rec = serve(srv, withCookie(remoteReq("GET", "/api/me", nil)))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"actor":"web:token"`)
	rec = serve(srv, withCookie(remoteReq("GET", "/", nil)))
	require.Equal(t, http.StatusOK, rec.Code)

	// Cookie-authenticated writes must come from this origin (CSRF).
	csrf := withCookie(remoteReq("POST", "/api/conversations", strings.NewReader(`{}`)))
	csrf.Header.Set("Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, serve(srv, csrf).Code)
	same := withCookie(remoteReq("POST", "/api/conversations", strings.NewReader(`{}`)))
	same.Header.Set("Origin", "http://bot.example:8080")
	require.Equal(t, http.StatusCreated, serve(srv, same).Code)
	// A bearer token is never sent by a browser on its own: no origin check needed.
	bearer := remoteReq("POST", "/api/conversations", strings.NewReader(`{}`))
	bearer.Header.Set("Authorization", "Bearer "+token)
	bearer.Header.Set("Origin", "https://tool.example")
	require.Equal(t, http.StatusCreated, serve(srv, bearer).Code)

	// On loopback the token is not needed, and the person there is web:local with or without it
	// (one admin.users entry covers the page and the CLI's fallback to this API).
	rec = serve(srv, loopbackReq("GET", "/api/me", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"actor":"web:local"`)
	r = loopbackReq("GET", "/api/me", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	rec = serve(srv, r)
	require.Contains(t, rec.Body.String(), `"actor":"web:local"`)
}

func TestLoopbackCSRF(t *testing.T) {
	srv := newTestServer(t, "")
	for name, hdr := range map[string][2]string{
		"foreign origin": {"Origin", "http://evil.example"},
		"cross-site":     {"Sec-Fetch-Site", "cross-site"},
		"same-site":      {"Sec-Fetch-Site", "same-site"},
	} {
		r := loopbackReq("POST", "/api/conversations", strings.NewReader(`{}`))
		r.Header.Set(hdr[0], hdr[1])
		require.Equal(t, http.StatusForbidden, serve(srv, r).Code, name)
	}
	r := loopbackReq("POST", "/api/conversations", strings.NewReader(`{}`))
	r.Header.Set("Origin", "http://127.0.0.1:8080")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusCreated, serve(srv, r).Code)
}

// TestLoopbackCrossSiteAPIReads: another site's page cannot use the loopback identity for the API's
// GETs either (<img src="http://localhost:8080/api/conversations/junk1/events"> registered a
// conversation per id, filling the list and pushing the real ones out), while the page itself,
// a navigation to it, and clients that send no Sec-Fetch-Site are let through.
func TestLoopbackCrossSiteAPIReads(t *testing.T) {
	srv := newTestServer(t, "")
	for _, tc := range []struct {
		target, site string
		code         int
	}{
		{"/api/conversations/junk1/events", "cross-site", http.StatusForbidden},
		{"/api/conversations/junk2/events", "same-site", http.StatusForbidden},
		{"/api/conversations", "cross-site", http.StatusForbidden},
		{"/api/me", "cross-site", http.StatusForbidden},
		{"/", "cross-site", http.StatusOK},
		{"/api/me", "same-origin", http.StatusOK},
		{"/api/me", "", http.StatusOK},
	} {
		r := loopbackReq("GET", tc.target, nil)
		ctx, cancel := context.WithCancel(r.Context())
		cancel() // a stream let through ends at once
		r = r.WithContext(ctx)
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		require.Equal(t, tc.code, serve(srv, r).Code, "%s %s", tc.target, tc.site)
	}
	require.Nil(t, srv.lookup("junk1", false))
	require.Nil(t, srv.lookup("junk2", false))
}

// TestCookieSecureBehindTLSProxy: behind a proxy that ends TLS the server sees plain HTTP, so the
// session cookies went out without Secure and a browser would send them over plain http:// too.
// A configured https PublicURL marks them Secure; X-Forwarded-Proto alone, which anyone can send,
// decides nothing.
func TestCookieSecureBehindTLSProxy(t *testing.T) {
	const token = "s3cret-token-0123456789"
	tests := []struct {
		name      string
		publicURL string
		forwarded string
		tls       bool
		want      bool
	}{
		{"plain http, nothing configured", "", "", false, false},
		{"TLS on this listener", "", "", true, true},
		{"X-Forwarded-Proto alone is not trusted", "", "https", false, false},
		{"https public URL", "https://chat.example.com", "", false, true},
		{"http public URL", "http://chat.example.com", "https", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newTestServerWith(t, Options{Token: token, LoginToken: "login-0123456789abcdef", PublicURL: tt.publicURL})
			for _, q := range []string{"token=" + token, "login=login-0123456789abcdef"} {
				r := remoteReq("GET", "/?"+q, nil)
				if tt.forwarded != "" {
					r.Header.Set("X-Forwarded-Proto", tt.forwarded)
				}
				if tt.tls {
					r.TLS = &tls.ConnectionState{}
				}
				rec := serve(srv, r)
				require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
				cookies := rec.Result().Cookies()
				require.Len(t, cookies, 1)
				require.Equal(t, tt.want, cookies[0].Secure, q)
			}
		})
	}
	_, err := New(Options{Handler: nopHandler{}, Directory: bot.NewDirectory(newStore(t)), PublicURL: "ftp://x"})
	require.Error(t, err)
}
