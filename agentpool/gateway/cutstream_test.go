package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCutStreamIsCounted: OpenAI reports a stream's usage in its last event only, so an agent that
// hangs up after the text it wanted must still be counted, or every call of it is free against the
// budgets. The input it was never told is estimated from the request, the output from the events.
func TestCutStreamIsCounted(t *testing.T) {
	for _, c := range apiCalls {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Budget{})
			gen := e.session(t, "web:c1")
			turnID := e.turn(t, "web:c1", "U1", "ev1")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			resp := e.do(ctx, t, c, Token(testSecret, "web:c1", gen), "HANG please", true)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			r := bufio.NewReader(resp.Body)
			for {
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				if strings.Contains(line, "Working") {
					break
				}
			}
			cancel()
			_ = resp.Body.Close()
			var u struct {
				In  int64 `json:"input_tokens"`
				Out int64 `json:"output_tokens"`
			}
			require.Eventually(t, func() bool {
				return json.Unmarshal([]byte(usageOf(t, e.store, turnID)), &u) == nil && u.In > 0 && u.Out > 0
			}, 10*time.Second, 10*time.Millisecond, "the cut stream's input and output are counted")
		})
	}
}

// TestCutShortEstimate: what a cut stream reported stands; what it did not is estimated.
func TestCutShortEstimate(t *testing.T) {
	m := usageMeter{api: apiChat}
	m.feed([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n"))
	require.Equal(t, Usage{Input: 250, Output: 2}, m.cutShort(1000))
	m = usageMeter{api: apiMessages}
	m.feed([]byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n"))
	require.Equal(t, Usage{Input: 7, Output: 1}, m.cutShort(1000), "a reported input is not estimated")
}
