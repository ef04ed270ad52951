package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/gateway/forward"
)

// BenchmarkStreamTTFB measures the gateway's added latency on a streamed answer (the Security
// issue's bench, target p99 ≤ 5 ms): time to the first body byte through the gateway minus the same
// straight to llmfake, at p50 and p99. The gateway does its whole per-call work (token, session row,
// running turn, the three budget sums on SQLite, usage recorded); "via-forwarder" adds the
// in-sandbox hop: the forwarder on TCP, then the gateway's unix socket.
func BenchmarkStreamTTFB(b *testing.B) {
	for _, via := range []string{"gateway", "via-forwarder"} {
		b.Run(via, func(b *testing.B) {
			e := newBenchEnv(b)
			gen := e.session(b, "web:bench")
			e.turn(b, "web:bench", "U1", "ev1")
			tok := Token(testSecret, "web:bench", gen)
			base := e.url
			if via == "via-forwarder" {
				base = e.forwarder(b, gen)
				tok = "placeholder" // the forwarder puts the sandbox token in
			}
			direct := &http.Client{Transport: &http.Transport{}}
			through := &http.Client{Transport: &http.Transport{}}
			body := apiCalls[0].body("hi", true)
			ttfb := func(c *http.Client, url, key string) time.Duration {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
				req.Header.Set("X-Api-Key", key)
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := c.Do(req)
				require.NoError(b, err)
				var one [1]byte
				_, err = resp.Body.Read(one[:])
				d := time.Since(start)
				require.NoError(b, err)
				_, err = readAllDiscard(resp)
				require.NoError(b, err, "the whole stream arrives")
				return d
			}
			var ds, gs []time.Duration
			for b.Loop() {
				ds = append(ds, ttfb(direct, e.upstream+"/v1/messages", anthropicKey))
				gs = append(gs, ttfb(through, base+AnthropicPath+"/v1/messages", tok))
			}
			p := func(xs []time.Duration, q float64) float64 {
				s := slices.Clone(xs)
				slices.Sort(s)
				return float64(s[min(len(s)-1, int(q*float64(len(s))))].Microseconds()) / 1000
			}
			b.ReportMetric(p(ds, 0.5), "direct-p50-ms")
			b.ReportMetric(p(gs, 0.5), "gateway-p50-ms")
			b.ReportMetric(p(gs, 0.5)-p(ds, 0.5), "added-p50-ms")
			b.ReportMetric(p(ds, 0.99), "direct-p99-ms")
			b.ReportMetric(p(gs, 0.99), "gateway-p99-ms")
			b.ReportMetric(p(gs, 0.99)-p(ds, 0.99), "added-p99-ms")
		})
	}
}

// benchEnv is env plus the upstream's URL and a budget, so that the budget sums run per call.
type benchEnv struct {
	*env
	upstream string
}

func newBenchEnv(b *testing.B) *benchEnv {
	e := newEnv(b, Budget{ThreadTokens: 1 << 50, UserDailyTokens: 1 << 50, DailyTokens: 1 << 50})
	return &benchEnv{env: e, upstream: e.upstreamURL}
}

// forwarder serves the thread's gateway socket and a forwarder in front of it, as in a sandbox, and
// returns the forwarder's URL.
func (e *benchEnv) forwarder(b *testing.B, gen int64) string {
	dir, err := e.g.socks.Listen(ident{Thread: "web:bench", Gen: gen})
	require.NoError(b, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	srv := httptest.NewUnstartedServer(forward.Handler(forward.Options{
		Socket: filepath.Join(dir, socketName), TokenFile: filepath.Join(dir, tokenName)}))
	srv.Listener = ln
	srv.Start()
	b.Cleanup(srv.Close)
	_, err = os.Stat(filepath.Join(dir, tokenName))
	require.NoError(b, err)
	return srv.URL
}
