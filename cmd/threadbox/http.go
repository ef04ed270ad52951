package main

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"time"
)

// httpTimeouts bound what one client can hold of the server.
type httpTimeouts struct {
	// ReadHeader bounds reading a request's headers: a client trickling them (slow loris) is cut off.
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included, per request: a 64 MiB upload gets it at
	// about 220 KB/s; a client that stalls mid-body is cut off instead of holding a goroutine. It does
	// not end event streams: net/http clears the read deadline once the body is read.
	Read time.Duration
	// Write bounds writing a response. Event streams lift it themselves (http.ResponseController in
	// bot/web); a slow admin command outlives the CLI's own 2-minute wait anyway.
	Write time.Duration
	// Idle bounds a kept-alive connection between requests.
	Idle time.Duration
}

var defaultHTTPTimeouts = httpTimeouts{
	ReadHeader: 10 * time.Second,
	Read:       5 * time.Minute,
	Write:      10 * time.Minute,
	Idle:       2 * time.Minute,
}

// newHTTPServer is serve's server: every timeout set, so slow or idle clients cannot pile up.
func newHTTPServer(h http.Handler, t httpTimeouts) *http.Server {
	d := defaultHTTPTimeouts
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cmp.Or(t.ReadHeader, d.ReadHeader),
		ReadTimeout:       cmp.Or(t.Read, d.Read),
		WriteTimeout:      cmp.Or(t.Write, d.Write),
		IdleTimeout:       cmp.Or(t.Idle, d.Idle),
	}
}

// metricsHandler guards GET /metrics. The listener is public when http.addr is not loopback (and then
// http.token is required by the config): with a token, every scraper must send it as a bearer token,
// loopback included (a reverse proxy on the host is loopback too); without one, only loopback clients
// are served. The figures name threads' counts and timings, not their content, but they are the
// operators' business.
func metricsHandler(token string, h http.Handler) http.Handler {
	want := sha256.Sum256([]byte("Bearer " + token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="threadbox metrics"`)
				http.Error(w, "metrics need \"Authorization: Bearer <http.token>\"", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "metrics are served to loopback clients only unless http.token is set", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
