package slackfake

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPeerEndsWithItsInput: a peer whose parent is gone (killed, or timed out by go test without
// its cleanups) sees its input end; it stops at once, even in the middle of a long request, instead
// of outliving the parent with go test's output pipe open.
func TestPeerEndsWithItsInput(t *testing.T) {
	bot := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(bot.Close)
	for name, req := range map[string]peerReq{
		"wait_reactions": {Op: "wait_reactions", Name: "white_check_mark", Count: 1, Timeout: time.Minute},
		"burst":          {Op: "burst", URL: bot.URL, Burst: Burst{N: 600, Rate: 10, Prefix: "C", Threads: 1, Users: 1, Text: "hi"}},
	} {
		t.Run(name, func(t *testing.T) {
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- servePeer(inR, outW) }()
			out := bufio.NewReader(outR)
			go func() { _, _ = io.Copy(io.Discard, out) }() // whatever it says after the hello
			fmt.Fprintln(inW, "{}")
			line, err := json.Marshal(req)
			require.NoError(t, err)
			// A pipe's write returns once the peer has read the line: the request is taken, and
			// the input ends before or while it runs.
			_, err = fmt.Fprintf(inW, "%s\n", line)
			require.NoError(t, err)
			require.NoError(t, inW.Close())
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the peer goes on with its request after its input ended")
			}
		})
	}
}
