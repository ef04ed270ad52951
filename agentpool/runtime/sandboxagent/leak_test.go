package sandboxagent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
)

// leakWatch is an acpFake whose resumed subscription ends the caller's ctx as it is answered, and
// tells when the client closed it.
type leakWatch struct {
	*acpFake
	ctx    *runtimetest.EndsAfter
	closed chan struct{}
}

func (l *leakWatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/acp/") && l.subs.Load() == 1 {
		l.ctx.End() // the caller gives up as the resubscription is answered
		defer close(l.closed)
	}
	l.acpFake.ServeHTTP(w, r)
}

// TestResumedStreamIsClosedWhenTheCallerGaveUp: a resubscription that succeeded just as the caller
// gave up was dropped without being closed: the stream outlives ctx by design, so its connection and
// pump goroutine stayed until the server ended the stream, which sandbox-agent's never does. The
// server must see the resumed stream closed once the turn has returned.
func TestResumedStreamIsClosedWhenTheCallerGaveUp(t *testing.T) {
	f := newACPFake()
	f.dropAt = 2
	f.onPrompt = answerAfterDrop
	l := &leakWatch{acpFake: f, ctx: &runtimetest.EndsAfter{Context: t.Context()}, closed: make(chan struct{})}
	srv := httptest.NewServer(l)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() }) // a stream left open would hold Close
	r, err := New(Config{Secret: "s", Model: opencode.Model{Name: "m"}})
	require.NoError(t, err)
	sb := runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}
	r.state.with(sb, func(st *sbState) { st.loaded["s1"] = true })
	_, err = r.Prompt(l.ctx, sb, "s1", runtime.Prompt{Text: "hi"}, nil)
	require.Error(t, err)
	require.GreaterOrEqual(t, f.subs.Load(), int32(2), "it subscribed again")
	select {
	case <-l.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed stream was left open after the turn returned")
	}
}
