package gateway

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/db/dbtest"
)

// gzipWriter compresses a response, flushing through for streams.
type gzipWriter struct {
	http.ResponseWriter
	z *gzip.Writer
}

func (w gzipWriter) Write(p []byte) (int, error) { return w.z.Write(p) }

func (w gzipWriter) Flush() {
	_ = w.z.Flush()
	w.ResponseWriter.(http.Flusher).Flush()
}

// gzipping is an upstream that compresses its answers when the client accepts it, as the model
// APIs' front ends do.
func gzipping(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		defer z.Close()
		h.ServeHTTP(gzipWriter{w, z}, r)
	})
}

// TestCompressedAnswersAreMetered: an SDK asks for gzip (Accept-Encoding) as a matter of course, or
// an agent does to dodge the budgets; the gateway must still read each answer's usage.
func TestCompressedAnswersAreMetered(t *testing.T) {
	for _, c := range apiCalls {
		for _, stream := range []bool{true, false} {
			t.Run(c.name+map[bool]string{true: " stream", false: ""}[stream], func(t *testing.T) {
				fake := llmfake.New(llmfake.Script{Default: &llmfake.Reply{Text: "hello there"}})
				up := httptest.NewServer(gzipping(fake))
				t.Cleanup(func() { fake.Close(); up.Close() })
				store := dbtest.OpenSQLite(t)
				g, err := New(Config{Secret: testSecret, AnthropicURL: up.URL, OpenAIURL: up.URL + "/v1",
					AnthropicKey: anthropicKey, OpenAIKey: openAIKey, SocketDir: shortTempDir(t)}, store, zaptest.NewLogger(t))
				require.NoError(t, err)
				gw := httptest.NewServer(g)
				t.Cleanup(func() { gw.Close(); _ = g.Close() })
				e := &env{g: g, store: store, fake: fake, url: gw.URL, upstreamURL: up.URL}

				gen := e.session(t, "web:c1")
				turnID := e.turn(t, "web:c1", "U1", "ev1")
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.url+c.path, strings.NewReader(c.body("hi", stream)))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept-Encoding", "gzip")
				tok := Token(testSecret, "web:c1", gen)
				if c.header == "X-Api-Key" {
					req.Header.Set("X-Api-Key", tok)
				} else {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				var body io.Reader = resp.Body
				if resp.Header.Get("Content-Encoding") == "gzip" {
					body, err = gzip.NewReader(resp.Body)
					require.NoError(t, err)
				}
				b, err := io.ReadAll(body)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
				require.Contains(t, string(b), "hello")
				require.JSONEq(t, `{"input_tokens":10,"output_tokens":5,"cost_micros":0}`, usageOf(t, e.store, turnID))
			})
		}
	}
}
