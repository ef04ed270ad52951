package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/threadbox/threadbox/bot"
)

// Identity. The web chat has no accounts: who you are follows from how you got in.
//   - A loopback client (see isLoopback) is web:local, the person at this machine, but only with
//     TrustLoopback (http.trust_loopback; make run sets it).
//   - The browser that used the one-time login link serve printed is web:local too: it was shown
//     to whoever started the bot.
//   - Any other client with the token is web:token: whoever was given it.
//
// Everyone else gets 401. These are the actors admin.users must list for the web ops view to run
// admin commands.
type identity struct {
	user  bot.User
	local bool
}

func (id identity) actor() string { return id.user.Qualified("web") }

var (
	localUser = bot.User{ID: "local", Name: "local user"}
	tokenUser = bot.User{ID: "token", Name: "token holder"}
)

type identityKey struct{}

func identityFrom(ctx context.Context) identity {
	id, _ := ctx.Value(identityKey{}).(identity)
	return id
}

// cookieName carries a value derived from the token (not the token itself) for the page and the
// requests a browser cannot add headers to (EventSource, <img>). loginCookieName carries the session
// the one-time login opened.
const (
	cookieName      = "threadbox_web"
	loginCookieName = "threadbox_login"
)

// authenticate finds the caller's identity or answers the request itself (401 or 403).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (identity, bool) {
	bearer := s.hasToken && s.bearerOK(r)
	byToken, byLogin, ambient := bearer, false, false
	if s.hasToken && !bearer {
		switch {
		case s.cookieOK(r):
			byToken, ambient = true, true
		case isPageBootstrap(r, "token") && s.tokenOK(r.URL.Query().Get("token")):
			// The page bootstrap: remember the token in a cookie the browser sends back on its own.
			s.setCookie(w, r, cookieName, s.cookieValue())
			byToken, ambient = true, true
		}
	}
	if !bearer && s.login != nil {
		switch {
		case s.login.cookieOK(r):
			byLogin, ambient = true, true
		case isPageBootstrap(r, "login"):
			if v, ok := s.login.spend(r.URL.Query().Get("login")); ok {
				s.setCookie(w, r, loginCookieName, v)
				byLogin, ambient = true, true
			}
		}
	}
	var id identity
	switch {
	case s.trustLo && isLoopback(r):
		// The person at this machine is web:local whether or not they also hold the token, so one
		// admin.users entry covers the page, the chat and the CLI's fallback to this API.
		id, ambient = identity{user: localUser, local: true}, !bearer
	case byLogin:
		id = identity{user: localUser}
	case byToken:
		id = identity{user: tokenUser}
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="threadbox"`)
		msg := "a token is required: send \"Authorization: Bearer <token>\", or open the page once as /?token=<token>"
		if !s.hasToken {
			msg = "the web chat needs its token, and none is configured: set http.token (then send \"Authorization: Bearer <token>\", " +
				"or open the page once as /?token=<token>), or http.trust_loopback: true to let in clients on this machine"
		}
		writeError(w, http.StatusUnauthorized, msg)
		return identity{}, false
	}
	// Credentials the browser attaches by itself (the cookie, or simply being on loopback) must not
	// let another site's page act here: refuse cross-origin writes (CSRF), and cross-origin API
	// reads too: some have effects (a stream registers its conversation), and only this origin's
	// page needs them. The page itself stays reachable from a link.
	if ambient && (!safeMethod(r.Method) || strings.HasPrefix(r.URL.Path, "/api/")) && crossOrigin(r) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
		return identity{}, false
	}
	return id, true
}

// isPageBootstrap is the page opened with a credential in its query (?token= or ?login=): the only
// request that may carry one, which the page then drops from the address bar.
func isPageBootstrap(r *http.Request, param string) bool {
	return r.Method == http.MethodGet && r.URL.Path == "/" && r.URL.Query().Has(param)
}

// setCookie sets a session cookie, Secure when this request came over TLS or the chat's public URL
// is https (TLS ended by a proxy in front).
func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, name, value string) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || s.secureCookies,
	})
}

// oneTimeLogin is a login link that works once: the first browser to open it gets a session cookie,
// and the token is spent. It is safe for concurrent use.
type oneTimeLogin struct {
	sum [32]byte
	// mu protects the following.
	mu    sync.Mutex
	spent bool
	// session is the hash of the cookie value the login issued.
	session [32]byte
}

func newOneTimeLogin(token string) *oneTimeLogin {
	return &oneTimeLogin{sum: sha256.Sum256([]byte(token))}
}

// spend trades the token for a session cookie value, once.
func (l *oneTimeLogin) spend(given string) (cookie string, ok bool) {
	if given == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(given))
	if subtle.ConstantTimeCompare(sum[:], l.sum[:]) != 1 {
		return "", false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spent {
		return "", false
	}
	cookie = randomID(32)
	l.spent, l.session = true, sha256.Sum256([]byte(cookie))
	return cookie, true
}

func (l *oneTimeLogin) cookieOK(r *http.Request) bool {
	c, err := r.Cookie(loginCookieName)
	if err != nil {
		return false
	}
	sum := sha256.Sum256([]byte(c.Value))
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spent && subtle.ConstantTimeCompare(sum[:], l.session[:]) == 1
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// crossOrigin reports a request a browser made on behalf of another site's page.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false // not sent by a browser for this request, or a same-origin GET
	}
	u, err := url.Parse(o)
	return err != nil || !strings.EqualFold(u.Host, r.Host)
}

func (s *Server) tokenOK(given string) bool {
	if given == "" {
		return false
	}
	// Hashing first makes the comparison constant-time in the token's length too.
	sum := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1
}

func (s *Server) bearerOK(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && s.tokenOK(strings.TrimSpace(tok))
}

func (s *Server) cookieValue() string {
	sum := sha256.Sum256(append([]byte("threadbox-web-cookie:"), s.tokenSum[:]...))
	return hex.EncodeToString(sum[:])
}

func (s *Server) cookieOK(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.cookieValue())) == 1
}

// isLoopback reports a request from this machine, to a loopback listener, by loopback name. All
// three matter:
//   - the listener's address, because a wildcard listener also gets remote connections;
//   - the peer's address, for the same reason;
//   - the Host header, because a page on any site can reach 127.0.0.1 through a DNS name that
//     resolves there (DNS rebinding), and only then carries a foreign Host.
//
// A request that came through a proxy (Forwarded headers) is not local: the proxy may be on
// loopback, but its client is not.
func isLoopback(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || !addrLoopback(la.String()) || !addrLoopback(r.RemoteAddr) {
		return false
	}
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func addrLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
