package opencode

import (
	"context"
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

// cutServer is an opencode server whose event stream drops mid-turn. The first /event stream confirms
// the subscription, waits for the prompt, reports the run busy with some of its answer, and then ends
// (a tunnel hiccup, a proxy's idle timeout). What the server does after that is the test's: every
// later /event request is answered by again.
type cutServer struct {
	sid string
	// base is the session's newest message before the prompt.
	base string
	// again answers the /event requests after the first; nil: 503 (the server never comes back).
	again func(w http.ResponseWriter, r *http.Request)
	// status is /session/status's answer once the prompt went out (before it: idle, nothing left
	// over from an earlier turn).
	status func() string
	// messages is /session/{id}/message?limit=50's answer.
	messages func() string
	// cutBeforeBusy ends the first stream right after the prompt, before the run shows anything.
	cutBeforeBusy bool
	// emitted gets every progress event the turn reports.
	emitted chan runtime.Event
	// startGrace is the runtime's (0: its default).
	startGrace time.Duration

	prompts  atomic.Int32
	events   atomic.Int32
	prompted chan struct{}
	// statusAsked and messagesAsked are closed once the first /session/status and
	// /session/{id}/message?limit=50 requests were answered.
	statusAsked, messagesAsked chan struct{}
	statusOnce, messagesOnce   atomic.Bool
}

func newCutServer() *cutServer {
	return &cutServer{sid: "ses_1", base: "msg_01", prompted: make(chan struct{}), statusAsked: make(chan struct{}), messagesAsked: make(chan struct{}),
		emitted: make(chan runtime.Event, 100)}
}

// serveOneRun is an /event stream on which session ses_1 runs once, once prompted is closed: busy,
// then idle.
func serveOneRun(w http.ResponseWriter, r *http.Request, prompted <-chan struct{}) {
	w.Header().Set("Content-Type", "text/event-stream")
	sendEvent(w, "server.connected", `{}`)
	select {
	case <-prompted:
	case <-r.Context().Done():
		return
	}
	sendEvent(w, "session.status", `{"sessionID":"ses_1","status":{"type":"busy"}}`)
	sendEvent(w, "session.idle", `{"sessionID":"ses_1"}`)
	<-r.Context().Done()
}

func sendEvent(w http.ResponseWriter, typ, props string) {
	fmt.Fprintf(w, "data: {\"type\":%q,\"properties\":%s}\n\n", typ, props)
	w.(http.Flusher).Flush()
}

func (c *cutServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/event":
		if c.events.Add(1) > 1 {
			if c.again == nil {
				http.Error(w, "restarting", http.StatusServiceUnavailable)
				return
			}
			c.again(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		sendEvent(w, "server.connected", `{}`)
		select {
		case <-c.prompted:
		case <-r.Context().Done():
			return
		}
		if !c.cutBeforeBusy {
			sendEvent(w, "session.status", `{"sessionID":"`+c.sid+`","status":{"type":"busy"}}`)
			sendEvent(w, "message.part.updated", `{"sessionID":"`+c.sid+`","part":{"id":"prt_1","sessionID":"`+c.sid+`","type":"text"}}`)
			sendEvent(w, "message.part.delta", `{"sessionID":"`+c.sid+`","partID":"prt_1","field":"text","delta":"the "}`)
		}
		// The handler returns: the stream ends mid-turn.
	case "/session/" + c.sid + "/prompt_async":
		if c.prompts.Add(1) == 1 {
			close(c.prompted)
		}
		w.WriteHeader(http.StatusNoContent)
	case "/session/status":
		w.Header().Set("Content-Type", "application/json")
		if c.prompts.Load() == 0 {
			fmt.Fprint(w, `{}`)
			return
		}
		fmt.Fprint(w, c.status())
		if !c.statusOnce.Swap(true) {
			close(c.statusAsked)
		}
	case "/session/" + c.sid + "/message":
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("limit") == "1" {
			fmt.Fprintf(w, `[{"info":{"id":%q,"role":"assistant","time":{"created":1,"completed":2}},"parts":[{"type":"text","text":"an older answer"}]}]`, c.base)
			return
		}
		fmt.Fprint(w, c.messages())
		if !c.messagesOnce.Swap(true) {
			close(c.messagesAsked)
		}
	case "/permission", "/question":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[]`)
	default:
		http.NotFound(w, r)
	}
}

// finished is the session's messages once the run answered: the older turn, then this one's.
func (c *cutServer) finished() string {
	return `[{"info":{"id":"` + c.base + `","role":"assistant","time":{"created":1,"completed":2}},"parts":[{"type":"text","text":"an older answer"}]},` +
		`{"info":{"id":"msg_02","role":"user","time":{"created":3}},"parts":[{"type":"text","text":"hi"}]},` +
		`{"info":{"id":"msg_03","role":"assistant","parentID":"msg_02","time":{"created":4,"completed":5}},"parts":[{"type":"text","text":"the answer"}]}]`
}

func (c *cutServer) run(t *testing.T, window time.Duration) (runtime.Result, []runtime.Event, error) {
	t.Helper()
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
	require.NoError(t, err)
	r.resumeWindow, r.startGrace = window, c.startGrace
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // only so that a regression fails rather than hangs
	defer cancel()
	var events []runtime.Event
	res, err := r.Prompt(ctx, runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, c.sid, runtime.Prompt{Text: "hi"},
		func(e runtime.Event) {
			events = append(events, e)
			c.emitted <- e
		})
	return res, events, err
}

// TestDroppedStreamIsFollowedAgain: the event stream drops after the server took the prompt. The turn
// subscribes again and follows the same run to its end: the answer comes, and the prompt was sent
// once. Without this the drop failed the turn as sandbox-down, and the pool sent the prompt again.
func TestDroppedStreamIsFollowedAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(c *cutServer)
	}{
		{"still running: its end comes on the new stream", func(c *cutServer) {
			var done atomic.Bool
			c.status = func() string {
				if !done.Load() {
					return `{"` + c.sid + `":{"type":"busy"}}`
				}
				return `{}`
			}
			c.messages = c.finished
			c.again = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sendEvent(w, "server.connected", `{}`)
				select {
				case <-c.statusAsked: // the runtime asked where the run stands: now it ends
				case <-r.Context().Done():
					return
				}
				done.Store(true)
				sendEvent(w, "session.status", `{"sessionID":"`+c.sid+`","status":{"type":"idle"}}`)
				sendEvent(w, "session.idle", `{"sessionID":"`+c.sid+`"}`)
				<-r.Context().Done()
			}
		}},
		{"finished while the stream was down", func(c *cutServer) {
			c.status = func() string { return `{}` }
			c.messages = c.finished
			c.again = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sendEvent(w, "server.connected", `{}`)
				<-r.Context().Done()
			}
		}},
		{"a resubscription accepted and never answered (a server starting) is made again", func(c *cutServer) {
			c.status = func() string { return `{}` }
			c.messages = c.finished
			c.again = func(w http.ResponseWriter, r *http.Request) {
				if c.events.Load() == 2 {
					<-r.Context().Done() // not even the headers: the turn must not wait for it
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				sendEvent(w, "server.connected", `{}`)
				<-r.Context().Done()
			}
		}},
		{"cut before the run showed anything, finished while down", func(c *cutServer) {
			c.cutBeforeBusy = true
			c.status = func() string { return `{}` }
			c.messages = c.finished
			c.again = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sendEvent(w, "server.connected", `{}`)
				<-r.Context().Done()
			}
		}},
		{"cut before the run started: not taken for the older answer", func(c *cutServer) {
			c.cutBeforeBusy = true
			var started atomic.Bool
			c.status = func() string { return `{}` }
			c.messages = func() string {
				if !started.Load() {
					// Only the older turn so far: the same words once more must not read as this run's end.
					return `[{"info":{"id":"` + c.base + `","role":"assistant","time":{"created":1,"completed":2}},"parts":[{"type":"text","text":"an older answer"}]}]`
				}
				return c.finished()
			}
			c.again = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sendEvent(w, "server.connected", `{}`)
				select {
				case <-c.messagesAsked: // the runtime looked, and saw no run of its own yet
				case <-r.Context().Done():
					return
				}
				// The run starts now. It ends only once the turn followed it on this stream (it reported
				// the run's progress): a turn that took the older answer for this run's end never does.
				sendEvent(w, "session.status", `{"sessionID":"`+c.sid+`","status":{"type":"busy"}}`)
				sendEvent(w, "message.part.updated", `{"sessionID":"`+c.sid+`","part":{"id":"prt_1","sessionID":"`+c.sid+`","type":"text"}}`)
				sendEvent(w, "message.part.delta", `{"sessionID":"`+c.sid+`","partID":"prt_1","field":"text","delta":"the answer"}`)
				select {
				case <-c.emitted:
				case <-r.Context().Done():
					return
				}
				started.Store(true)
				sendEvent(w, "session.status", `{"sessionID":"`+c.sid+`","status":{"type":"idle"}}`)
				<-r.Context().Done()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCutServer()
			tc.cut(c)
			res, _, err := c.run(t, time.Minute)
			require.NoError(t, err)
			require.Equal(t, "the answer", res.Answer)
			require.False(t, res.IsError)
			require.Equal(t, int32(1), c.prompts.Load(), "the prompt was sent once")
			require.GreaterOrEqual(t, c.events.Load(), int32(2), "it subscribed again")
		})
	}
}

// TestLostRunIsCutNotRetried: when the run cannot be followed again, the turn ends with
// runtime.ErrPromptCut (the pool tells the user it was interrupted), never as sandbox-down (which
// the pool retries by sending the prompt again), and the prompt was sent once.
func TestLostRunIsCutNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(c *cutServer)
	}{
		{"the server never comes back", func(c *cutServer) {}},
		{"the server restarted and lost the run", func(c *cutServer) {
			c.status = func() string { return `{}` }
			c.messages = func() string {
				return `[{"info":{"id":"msg_02","role":"user","time":{"created":3}},"parts":[{"type":"text","text":"hi"}]},` +
					`{"info":{"id":"msg_03","role":"assistant","parentID":"msg_02","time":{"created":4}},"parts":[{"type":"text","text":"the "}]}]`
			}
			c.again = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				sendEvent(w, "server.connected", `{}`)
				<-r.Context().Done()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCutServer()
			tc.cut(c)
			_, events, err := c.run(t, 300*time.Millisecond)
			require.ErrorIs(t, err, runtime.ErrPromptCut)
			require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)
			require.Equal(t, int32(1), c.prompts.Load(), "the prompt was sent once")
			require.NotEmpty(t, events, "the run had started")
		})
	}
}

// TestPromptSentButUnansweredIsCut: a prompt_async that went out whole and got no answer of the
// server's may be running, so it is ErrPromptCut, not sandbox-down (which the pool answered by sending
// the prompt again, for a second run beside the first): its connection cut after the server read it,
// or a server error (a 502 from a proxy in front of the server, such as Daytona's preview proxy,
// whose upstream connection broke after the request was forwarded; a 500 from the server itself),
// as sandbox-agent has it.
func TestPromptSentButUnansweredIsCut(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter)
	}{
		{"cut without an answer", func(w http.ResponseWriter) {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		}},
		{"500", func(w http.ResponseWriter) { http.Error(w, "upstream", http.StatusInternalServerError) }},
		{"502", func(w http.ResponseWriter) { http.Error(w, "upstream", http.StatusBadGateway) }},
		{"504", func(w http.ResponseWriter) { http.Error(w, "upstream", http.StatusGatewayTimeout) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prompts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/event":
					w.Header().Set("Content-Type", "text/event-stream")
					sendEvent(w, "server.connected", `{}`)
					<-r.Context().Done()
				case "/session/ses_1/message":
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `[]`)
				case "/session/status":
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{}`)
				case "/session/ses_1/prompt_async":
					prompts.Add(1) // read whole: the run may have started
					tc.answer(w)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
			require.NoError(t, err)
			_, err = r.Prompt(t.Context(), runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, "ses_1", runtime.Prompt{Text: "hi"}, nil)
			require.ErrorIs(t, err, runtime.ErrPromptCut)
			require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)
			require.Equal(t, int32(1), prompts.Load())
		})
	}
}

// TestAnswerIsReadAgain: the run finished, and reading its answer failed once (a 503 from a proxy, a
// cut connection): the answer is read again, not the prompt sent again.
func TestAnswerIsReadAgain(t *testing.T) {
	var prompts, reads atomic.Int32
	prompted := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/event":
			serveOneRun(w, r, prompted)
		case "/session/ses_1/prompt_async":
			if prompts.Add(1) == 1 {
				close(prompted)
			}
			w.WriteHeader(http.StatusNoContent)
		case "/session/status":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{}`)
		case "/session/ses_1/message":
			if r.URL.Query().Get("limit") != "1" && reads.Add(1) == 1 {
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `[{"info":{"id":"msg_02","role":"user"},"parts":[{"type":"text","text":"hi"}]},`+
				`{"info":{"id":"msg_03","role":"assistant","time":{"created":4,"completed":5}},"parts":[{"type":"text","text":"the answer"}]}]`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
	require.NoError(t, err)
	res, err := r.Prompt(t.Context(), runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, "ses_1", runtime.Prompt{Text: "hi"}, nil)
	require.NoError(t, err)
	require.Equal(t, "the answer", res.Answer)
	require.Equal(t, int32(1), prompts.Load())
	require.Equal(t, int32(2), reads.Load(), "read again after the failure")
}
