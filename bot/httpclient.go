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
// also opens at most maxPerHost connections to one host: a burst of 2,000 events, each with its 👀
// reaction, used to dial as many connections as calls were in flight; now the surplus waits for a
// free connection (BenchmarkEventsAck: with 64 rather than 256 the burst's ack p99 was a third
// lower). A platform whose uploads go to the same host as its reactions needs a larger bound, so
// that slow uploads cannot hold every connection.
func APIClient(maxPerHost int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = min(64, maxPerHost)
	t.MaxConnsPerHost = maxPerHost
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}
