package sandboxagent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// spinFake is an acpFake whose subscriptions after the first are accepted and closed at once, with
// nothing in them (a server, tunnel or proxy that drops each new stream), fruitless times; the next
// one is served again.
type spinFake struct {
	*acpFake
	fruitless int

	mu sync.Mutex // protects at
	at []time.Time
}

func (s *spinFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/acp/") && s.subs.Load() > 0 {
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		n := len(s.at)
		s.mu.Unlock()
		if n <= s.fruitless {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			return
		}
	}
	s.acpFake.ServeHTTP(w, r)
}

// TestStreamThatKeepsDroppingIsNotSpun: a stream that is accepted and closed at once, again and again,
// while the agent works on, must not be asked for again in a tight loop for the rest of the turn:
// each resubscription came with a fresh backoff, so none waited. Resubscriptions that bring nothing
// new are spaced out from sandboxhttp.RetryFirstDelay, doubling; the turn still answers once the
// stream serves again, and the prompt was sent once.
func TestStreamThatKeepsDroppingIsNotSpun(t *testing.T) {
	f := &spinFake{acpFake: newACPFake(), fruitless: 5}
	f.dropAt = 2
	f.onPrompt = answerAfterDrop
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
	require.NoError(t, err)
	sb := runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}
	r.state.with(sb, func(st *sbState) { st.loaded["s1"] = true })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // only so that a regression fails rather than hangs
	defer cancel()
	res, err := r.Prompt(ctx, sb, "s1", runtime.Prompt{Text: "hi"}, nil)
	require.NoError(t, err)
	require.Equal(t, "Hello, world.", res.Answer)
	require.Equal(t, int32(1), f.prompts.Load(), "the prompt was sent once")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.at, f.fruitless+1)
	// The first resubscription is at once; the next ones wait 25, 50, 100, 200 ms at least.
	want := time.Duration(0)
	for i := range f.fruitless - 1 {
		want += sandboxhttp.RetryFirstDelay << i
	}
	require.GreaterOrEqual(t, f.at[f.fruitless].Sub(f.at[0]), want, "resubscriptions that brought nothing are spaced out")
}
