package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoopbackIsNotTrustedUnlessTold(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		want  int
		actor string
	}{
		{"default: no token, no trust", Options{}, http.StatusUnauthorized, ""},
		{"default with a token configured", Options{Token: "t0ken-value"}, http.StatusUnauthorized, ""},
		{"trust_loopback", Options{TrustLoopback: true}, http.StatusOK, `"actor":"web:local"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := serve(newTestServerWith(t, tc.opts), loopbackReq("GET", "/api/me", nil))
			require.Equal(t, tc.want, rec.Code)
			require.Contains(t, rec.Body.String(), tc.actor)
		})
	}
}

// TestReverseProxyIsNotLocal is the Security issue's acceptance: with loopback trusted, a request
// through a reverse proxy on this machine (httputil.ReverseProxy with default settings) is not
// web:local, and gets 401 without the token. Real listeners, so the server sees real addresses.
func TestReverseProxyIsNotLocal(t *testing.T) {
	const token = "proxy-t0ken-value"
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"a token is configured", token},
		{"no token is configured", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bot := httptest.NewServer(newTestServerWith(t, Options{Token: tc.token, TrustLoopback: true}))
			defer bot.Close()
			target, err := url.Parse(bot.URL)
			require.NoError(t, err)
			proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
			defer proxy.Close()

			get := func(base, auth string) (int, string) {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/me", nil)
				require.NoError(t, err)
				if auth != "" {
					req.Header.Set("Authorization", "Bearer "+auth)
				}
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer res.Body.Close()
				body, err := io.ReadAll(res.Body)
				require.NoError(t, err)
				return res.StatusCode, string(body)
			}
			code, body := get(bot.URL, "")
			require.Equal(t, http.StatusOK, code, "direct from loopback: trusted")
			require.Contains(t, body, `"actor":"web:local"`)

			code, body = get(proxy.URL, "")
			require.Equal(t, http.StatusUnauthorized, code, "through the proxy: %s", body)
			require.NotContains(t, body, "web:local")
			if tc.token != "" {
				code, body = get(proxy.URL, tc.token)
				require.Equal(t, http.StatusOK, code)
				require.Contains(t, body, `"actor":"web:token"`, "the token holder, not the person at this machine")
			}
		})
	}
}

func TestOneTimeLoginLink(t *testing.T) {
	const login = "one-time-login-value"
	srv := newTestServerWith(t, Options{LoginToken: login})
	require.Equal(t, http.StatusUnauthorized, serve(srv, remoteReq("GET", "/?login=wrong", nil)).Code)
	require.Equal(t, http.StatusUnauthorized, serve(srv, remoteReq("GET", "/api/me?login="+login, nil)).Code,
		"only the page trades the link for a session")

	rec := serve(srv, remoteReq("GET", "/?login="+login, nil))
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, "/", rec.Header().Get("Location"), "the token leaves the address bar")
	cookies := rec.Result().Cookies()
	require.Len(t, cookies, 1)
	ck := cookies[0]
	require.Equal(t, loginCookieName, ck.Name)
	require.True(t, ck.HttpOnly)
	require.NotContains(t, ck.Value, login)

	me := remoteReq("GET", "/api/me", nil)
	me.AddCookie(ck)
	rec = serve(srv, me)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"actor":"web:local"`, "the link was shown to whoever started the bot")

	require.Equal(t, http.StatusUnauthorized, serve(srv, remoteReq("GET", "/?login="+login, nil)).Code, "spent")
	forged := remoteReq("GET", "/api/me", nil)
	forged.AddCookie(&http.Cookie{Name: loginCookieName, Value: "guess"})
	require.Equal(t, http.StatusUnauthorized, serve(srv, forged).Code)
}
