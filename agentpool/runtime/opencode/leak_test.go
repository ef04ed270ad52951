package opencode

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestResumedStreamIsClosedWhenTheCallerGaveUp: a resubscription that succeeded just as the caller
// gave up was dropped without being closed: the stream outlives ctx by design, so its connection and
// pump goroutine stayed until the server ended the stream, which opencode's never does. The server
// must see the resumed stream closed once the turn has returned.
func TestResumedStreamIsClosedWhenTheCallerGaveUp(t *testing.T) {
	var subs atomic.Int32
	prompted := make(chan struct{})
	resumedClosed := make(chan struct{})
	ctx := &runtimetest.EndsAfter{Context: t.Context()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/event":
			n := subs.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			sendEvent(w, "server.connected", `{}`)
			if n == 1 {
				select {
				case <-prompted:
				case <-r.Context().Done():
					return
				}
				sendEvent(w, "session.status", `{"sessionID":"ses_1","status":{"type":"busy"}}`)
				return // the first stream drops mid-turn
			}
			<-r.Context().Done() // the resumed stream: open until the client closes it
			close(resumedClosed)
		case "/session/ses_1/prompt_async":
			close(prompted)
			w.WriteHeader(http.StatusNoContent)
		case "/session/ses_1/message":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `[]`)
		case "/session/status":
			w.Header().Set("Content-Type", "application/json")
			select {
			case <-prompted:
				fmt.Fprint(w, `{"ses_1":{"type":"busy"}}`)
			default:
				fmt.Fprint(w, `{}`) // before the prompt: nothing left over
			}
		case "/permission":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `[]`)
		case "/question": // the resumption's last call: the caller gives up as it is answered
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `[]`)
			ctx.End()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() }) // a stream left open would hold Close
	r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
	require.NoError(t, err)
	_, err = r.Prompt(ctx, runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, "ses_1", runtime.Prompt{Text: "hi"}, nil)
	require.Error(t, err)
	require.Equal(t, int32(2), subs.Load(), "it subscribed again")
	select {
	case <-resumedClosed:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed stream was left open after the turn returned")
	}
}
