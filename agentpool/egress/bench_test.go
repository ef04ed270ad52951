package egress_test

import (
	"io"
	"net/http"
	"net/url"
	"testing"
)

// BenchmarkProxyGet: one small GET of the allowlisted stand-in, direct and through the proxy (checks,
// lookup, pooled upstream connection), over loopback. The difference is what the proxy adds.
func BenchmarkProxyGet(b *testing.B) {
	r := newRig(b)
	pu, _ := url.Parse(r.proxyURL)
	for _, tc := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"direct", &http.Client{Transport: &http.Transport{}}, r.mirror.URL + "/"},
		{"proxied", &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}, "http://mirror.test:" + r.port + "/"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := tc.client.Get(tc.url)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}
