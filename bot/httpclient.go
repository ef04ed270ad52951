package bot

import (
	"net/http"
	"time"
)

// APIClient returns the HTTP client an adapter calls its platform's Web API with, when the operator
// gave none. Every call carries its own context deadline (uploads may be large), so there is no
// overall timeout.
//
// It keeps up to 64 idle connections to one host, where http.DefaultTransport keeps 2: every call
// goes to the same API host, and with more than 2 in flight (reactions, progress edits and answers
// of many threads at once) the surplus connections were closed after each call and dialled again,
// a TLS handshake each time, latency and CPU spent under exactly the load where both matter. It
// also opens at most 256 connections to one host: a burst of 2,000 events, each with its 👀
// reaction, used to dial as many connections as calls were in flight; now the surplus waits for a
// free connection. The bound is well above what the platforms' rate limits let through, because
// Discord's uploads go to the same host as its reactions and must not hold them all up.
func APIClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.MaxConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}
