package opencode

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// TestStaleIdleDoesNotEndTheTurn: a session.idle left over from before the prompt (here sent as the
// stream opens) must not end the turn; the turn ends at the idle after our prompt made the session
// busy. The fake server finishes the turn only once its permission request is answered, which the
// runtime does only if it is still following the turn, so an early end reads no answer.
func TestStaleIdleDoesNotEndTheTurn(t *testing.T) {
	const sid = "ses_1"
	prompted, replied, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	send := func(w http.ResponseWriter, typ, props string) {
		fmt.Fprintf(w, "data: {\"type\":%q,\"properties\":%s}\n\n", typ, props)
		w.(http.Flusher).Flush()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/event":
			w.Header().Set("Content-Type", "text/event-stream")
			send(w, "server.connected", `{}`)
			send(w, "session.idle", `{"sessionID":"`+sid+`"}`) // stale: from before our prompt
			for _, wait := range []chan struct{}{prompted, replied} {
				select {
				case <-wait:
				case <-r.Context().Done():
					return
				}
				if wait == prompted {
					send(w, "session.status", `{"sessionID":"`+sid+`","status":{"type":"busy"}}`)
					send(w, "permission.asked", `{"sessionID":"`+sid+`","id":"per_1"}`)
				}
			}
			close(finished)
			send(w, "session.status", `{"sessionID":"`+sid+`","status":{"type":"idle"}}`)
			send(w, "session.idle", `{"sessionID":"`+sid+`"}`)
			<-r.Context().Done()
		case "/session/status":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{}`)
		case "/session/" + sid + "/prompt_async":
			w.WriteHeader(http.StatusNoContent)
			close(prompted)
		case "/permission/per_1/reply":
			w.WriteHeader(http.StatusOK)
			once.Do(func() { close(replied) })
		case "/session/" + sid + "/message":
			w.Header().Set("Content-Type", "application/json")
			select {
			case <-finished:
				fmt.Fprint(w, `[{"info":{"role":"user"},"parts":[{"type":"text","text":"hi"}]},`+
					`{"info":{"role":"assistant"},"parts":[{"type":"text","text":"the answer"}]}]`)
			default:
				fmt.Fprint(w, `[{"info":{"role":"user"},"parts":[{"type":"text","text":"hi"}]}]`)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
	require.NoError(t, err)
	res, err := r.Prompt(t.Context(), runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, sid, runtime.Prompt{Text: "hi"}, nil)
	require.NoError(t, err)
	require.Equal(t, "the answer", res.Answer)
}
