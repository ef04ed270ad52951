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

	"github.com/threadbox/threadbox/bot"
)

// Identity. The web chat has no accounts: who you are follows from how you got in.
//   - A loopback client (see isLoopback) is web:local: the person at this machine.
//   - Any other client with the token is web:token: whoever was given it.
//
// These are the actors admin.users must list for the web ops view to run admin commands.
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
// requests a browser cannot add headers to (EventSource, <img>).
const cookieName = "threadbox_web"

// authenticate finds the caller's identity or answers the request itself (401 or 403).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (identity, bool) {
	bearer := s.hasToken && s.bearerOK(r)
	byToken, ambient := bearer, false
	if s.hasToken && !bearer {
		switch {
		case s.cookieOK(r):
			byToken, ambient = true, true
		case r.Method == http.MethodGet && r.URL.Path == "/" && s.tokenOK(r.URL.Query().Get("token")):
			// The page bootstrap: remember the token in a cookie the browser sends back on its own.
			http.SetCookie(w, &http.Cookie{
				Name: cookieName, Value: s.cookieValue(), Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
			})
			byToken, ambient = true, true
		}
	}
	local := isLoopback(r)
	var id identity
	switch {
	case local:
		// The person at this machine is web:local whether or not they also hold the token, so one
		// admin.users entry covers the page, the chat and the CLI's fallback to this API.
		id, ambient = identity{user: localUser, local: true}, !bearer
	case byToken:
		id = identity{user: tokenUser}
	case !s.hasToken:
		writeError(w, http.StatusForbidden, "the web chat serves only loopback clients unless a web token is configured")
		return identity{}, false
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="threadbox"`)
		writeError(w, http.StatusUnauthorized, "a token is required: send \"Authorization: Bearer <token>\", or open the page once as /?token=<token>")
		return identity{}, false
	}
	// Credentials the browser attaches by itself (the cookie, or simply being on loopback) must not
	// let another site's page act here: refuse cross-origin writes (CSRF).
	if ambient && !safeMethod(r.Method) && crossOrigin(r) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
		return identity{}, false
	}
	return id, true
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
