package opencode

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
)

// TestStreamThatKeepsDroppingIsNotSpun: a server (or a tunnel, a proxy) that accepts every new
// subscription and closes it at once, while the run goes on, must not be asked again in a tight loop
// for the rest of the turn: each resubscription came with a fresh backoff, so none waited, and the
// turn hammered the server (and, through the provider's Dial, the Docker daemon) with a subscription,
// a status read and two more calls per loop for as long as the run lasted. Resubscriptions that bring
// nothing are spaced out from sandboxhttp.RetryFirstDelay, doubling; one that brings an event starts
// again at once.
func TestStreamThatKeepsDroppingIsNotSpun(t *testing.T) {
	const fruitless = 5 // resubscriptions closed at once before the run's end comes
	c := newCutServer()
	var done atomic.Bool
	c.status = func() string {
		if !done.Load() {
			return `{"` + c.sid + `":{"type":"busy"}}`
		}
		return `{}`
	}
	c.messages = c.finished
	var mu sync.Mutex
	var at []time.Time
	c.again = func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		n := len(at)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		sendEvent(w, "server.connected", `{}`)
		if n <= fruitless {
			return // closed at once
		}
		done.Store(true)
		sendEvent(w, "session.status", `{"sessionID":"`+c.sid+`","status":{"type":"idle"}}`)
		sendEvent(w, "session.idle", `{"sessionID":"`+c.sid+`"}`)
		<-r.Context().Done()
	}
	res, _, err := c.run(t, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "the answer", res.Answer)
	require.Equal(t, int32(1), c.prompts.Load(), "the prompt was sent once")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, at, fruitless+1)
	// The first resubscription is at once; the next ones wait 25, 50, 100, 200 ms at least.
	want := time.Duration(0)
	for i := range fruitless - 1 {
		want += sandboxhttp.RetryFirstDelay << i
	}
	require.GreaterOrEqual(t, at[fruitless].Sub(at[0]), want, "resubscriptions that brought nothing are spaced out")
}
