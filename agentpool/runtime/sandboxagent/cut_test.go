package sandboxagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// acpFake is a sandbox-agent ACP server as far as a turn sees it: every envelope it sends goes into a
// ring with a sequence id, each stream gets what follows its Last-Event-ID and then what comes, and the
// first stream ends (the drop) once it sent event dropAt.
type acpFake struct {
	mu      sync.Mutex // protects events and changed
	events  []string
	changed chan struct{} // closed and replaced at each new event

	dropAt int
	// dropped is closed when the first stream ended.
	dropped chan struct{}
	// later answers the subscriptions after the first: 0 serves them, else that status.
	later int
	// skip is how many events the server lost before a later subscription's replay (its buffer
	// overflowed).
	skip int
	// onPrompt is the agent's turn: it gets the prompt's id, and answers the POST.
	onPrompt func(f *acpFake, id json.RawMessage, w http.ResponseWriter, r *http.Request)
	// gen is the ACP server's createdAtMs, listed by GET /v1/acp (0: not listed).
	gen atomic.Int64
	// restartOnPrompt makes sandbox-agent restart just before the prompt's POST arrives, which
	// (carrying ?agent=) creates the ACP server anew: a new gen, an empty ring whose ids start
	// over, and the streams of the old one ended.
	restartOnPrompt bool
	// epoch is closed when the server restarts (protected by mu).
	epoch chan struct{}

	prompts      atomic.Int32
	subs         atomic.Int32
	lastEventIDs chan string
}

func newACPFake() *acpFake {
	return &acpFake{changed: make(chan struct{}), dropped: make(chan struct{}), lastEventIDs: make(chan string, 16),
		epoch: make(chan struct{})}
}

// restart is sandbox-agent restarting, and the ACP server being created again.
func (f *acpFake) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = nil
	close(f.epoch)
	f.epoch = make(chan struct{})
	f.gen.Add(1000)
}

func (f *acpFake) push(payload string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, payload)
	close(f.changed)
	f.changed = make(chan struct{})
}

// since returns the events after the first n, a channel closed at the next one, and one closed when
// the server restarts.
func (f *acpFake) since(n int) ([]string, <-chan struct{}, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > len(f.events) {
		n = len(f.events)
	}
	return append([]string(nil), f.events[n:]...), f.changed, f.epoch
}

func chunk(text string) string {
	return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":` + strconv.Quote(text) + `}}}}`
}

func endTurn(id json.RawMessage) string {
	return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":2}}}`
}

func (f *acpFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/acp/"):
		conn := f.subs.Add(1)
		f.lastEventIDs <- r.Header.Get("Last-Event-ID")
		if conn > 1 && f.later != 0 {
			http.Error(w, "no", f.later)
			return
		}
		n, _ := strconv.Atoi(r.Header.Get("Last-Event-ID"))
		if conn > 1 {
			n += f.skip
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		_, _, epoch := f.since(0)
		for {
			evs, changed, now := f.since(n)
			if now != epoch {
				return // the server restarted: its streams end
			}
			for _, e := range evs {
				n++
				fmt.Fprintf(w, "event: message\nid: %d\ndata: %s\n\n", n, e)
				w.(http.Flusher).Flush()
				if conn == 1 && n == f.dropAt {
					close(f.dropped)
					return // the stream drops
				}
			}
			select {
			case <-changed:
			case <-epoch:
				return
			case <-r.Context().Done():
				return
			}
		}
	case r.Method == http.MethodGet && r.URL.Path == "/v1/acp":
		w.Header().Set("Content-Type", "application/json")
		if gen := f.gen.Load(); gen != 0 {
			fmt.Fprintf(w, `{"servers":[{"serverId":"threadbox-opencode","agent":"opencode","createdAtMs":%d}]}`, gen)
			return
		}
		fmt.Fprint(w, `{"servers":[]}`)
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/acp/"):
		var env struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil || env.ID == nil || env.Method == "" {
			w.WriteHeader(http.StatusAccepted) // a notification, or our answer to the agent
			return
		}
		if env.Method == "session/prompt" {
			f.prompts.Add(1)
			if f.restartOnPrompt {
				f.restart()
			}
			f.onPrompt(f, env.ID, w, r)
			return
		}
		resp := `{"jsonrpc":"2.0","id":` + string(env.ID) + `,"error":{"code":-32601,"message":"Method not found"}}`
		f.push(resp)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, resp)
	default:
		http.NotFound(w, r)
	}
}

// answerAfterDrop is an agent that streams the start of its answer, and the rest once the first
// stream dropped; the POST answers with the result, as sandbox-agent 0.4.2's does.
func answerAfterDrop(f *acpFake, id json.RawMessage, w http.ResponseWriter, r *http.Request) {
	f.push(chunk("Hello"))
	select {
	case <-f.dropped:
	case <-r.Context().Done():
		return
	}
	f.push(chunk(", world."))
	f.push(endTurn(id))
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, endTurn(id))
}

func (f *acpFake) prompt(t *testing.T, window time.Duration) (runtime.Result, error) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
	require.NoError(t, err)
	r.resumeWindow = window
	sb := runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}
	r.state.with(sb, func(st *sbState) { st.loaded["s1"], st.gen = true, f.gen.Load() }) // as Session leaves it
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)                         // only so that a regression fails rather than hangs
	defer cancel()
	return r.Prompt(ctx, sb, "s1", runtime.Prompt{Text: "hi"}, nil)
}

// TestDroppedStreamIsFollowedAgain: the event stream drops after the agent took the prompt. The turn
// subscribes again after the last event it saw (Last-Event-ID), reads the rest of the run from the
// server's replay to the prompt's response, and answers; the prompt was sent once. Without this the
// drop failed the turn as sandbox-down, and the pool sent the prompt again.
func TestDroppedStreamIsFollowedAgain(t *testing.T) {
	f := newACPFake()
	f.dropAt = 2 // the barrier's echo, then the answer's first chunk
	f.onPrompt = answerAfterDrop
	res, err := f.prompt(t, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "Hello, world.", res.Answer, "the events before and after the drop, each once")
	require.False(t, res.IsError)
	require.Equal(t, int32(1), f.prompts.Load(), "the prompt was sent once")
	require.Equal(t, int32(2), f.subs.Load())
	require.Equal(t, "", <-f.lastEventIDs)
	require.Equal(t, "2", <-f.lastEventIDs, "subscribed again after the last event seen")
}

// TestPromptCallCutIsFollowedOn: the session/prompt call, held open for the whole turn, is cut after
// it went out. The agent has the prompt; its response comes on the stream, and the turn answers
// without sending the prompt again (before, the cut call failed the turn as sandbox-down).
func TestPromptCallCutIsFollowedOn(t *testing.T) {
	f := newACPFake()
	f.onPrompt = func(f *acpFake, id json.RawMessage, w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close() // the call's connection is cut; the agent works on
		}
		f.push(chunk("Done."))
		f.push(endTurn(id))
	}
	res, err := f.prompt(t, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "Done.", res.Answer)
	require.Equal(t, int32(1), f.prompts.Load())
}

// TestLostRunIsCutNotRetried: when the run cannot be followed again, the turn ends with
// runtime.ErrPromptCut (the pool tells the user it was interrupted), never as sandbox-down or
// session-missing (which the pool answers by sending the prompt again); the prompt was sent once.
func TestLostRunIsCutNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		later int
		skip  int
	}{
		{"the server never comes back", http.StatusServiceUnavailable, 0},
		{"the ACP server is gone (sandbox-agent restarted)", http.StatusNotFound, 0},
		{"events were lost past the server's buffer", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newACPFake()
			f.dropAt, f.later, f.skip = 2, tc.later, tc.skip
			f.onPrompt = answerAfterDrop
			_, err := f.prompt(t, 300*time.Millisecond)
			require.ErrorIs(t, err, runtime.ErrPromptCut)
			require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)
			require.Equal(t, int32(1), f.prompts.Load(), "the prompt was sent once")
		})
	}
}

// TestPromptCallOutcome: what a failed session/prompt call means for the turn. Cut after it went out,
// the agent has the prompt: the turn follows on (its response comes on the stream). A server error
// after it went out leaves its fate unknown: interrupted, never sent again. Only a call that never
// went out may be sent again (sandbox-down).
func TestPromptCallOutcome(t *testing.T) {
	sent := fmt.Errorf("sandbox-agent POST /v1/acp/x: %w: %w: EOF", runtime.ErrSandboxDown, sandboxhttp.ErrSentUnanswered)
	refused := fmt.Errorf("sandbox-agent POST /v1/acp/x: %w: dial: connection refused", runtime.ErrSandboxDown)
	serverErr := fmt.Errorf("sandbox-agent POST /v1/acp/x: %w: 500 Internal Server Error: agent process exited", runtime.ErrSandboxDown)
	tests := []struct {
		name   string
		out    postOutcome
		goesOn bool
		want   runtime.Class
	}{
		{"answered", postOutcome{status: http.StatusOK}, true, runtime.ClassNone},
		{"cut after it went out", postOutcome{err: sent}, true, runtime.ClassNone},
		{"never went out", postOutcome{err: refused}, false, runtime.ClassSandboxDown},
		{"a server error after it went out", postOutcome{status: http.StatusInternalServerError, err: serverErr}, false, runtime.ClassInterrupted},
		{"refused", postOutcome{status: http.StatusBadRequest, err: errors.New("400 Bad Request")}, false, runtime.ClassFatal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.out.failure()
			require.Equal(t, tt.goesOn, err == nil, "%v", err)
			require.Equal(t, tt.want, runtime.Classify(err))
		})
	}
}
