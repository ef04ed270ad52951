package opencode

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/sandbox"
)

// mutingSandbox withholds every event the server sends from the moment the prompt goes out, as a
// tunnel or proxy that stalls does: the turn's event stream (the connections that asked for /event)
// delivers nothing more, until it ends. prompted is closed as the prompt is written.
type mutingSandbox struct {
	sandbox.Sandbox
	prompted chan struct{}
	once     sync.Once

	mu      sync.Mutex // protects streams
	streams []*mutedConn
}

func (s *mutingSandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	c, err := s.Sandbox.Dial(ctx, port)
	if err != nil {
		return nil, err
	}
	return &mutedConn{Conn: c, s: s}, nil
}

// mutedConn is one connection of mutingSandbox.
type mutedConn struct {
	net.Conn
	s     *mutingSandbox
	muted atomic.Bool
}

func (c *mutedConn) Write(p []byte) (int, error) {
	switch {
	case bytes.HasPrefix(p, []byte("GET /event ")):
		c.s.mu.Lock()
		c.s.streams = append(c.s.streams, c)
		c.s.mu.Unlock()
	case bytes.Contains(p, []byte("/prompt_async ")):
		c.s.once.Do(func() {
			c.s.mu.Lock()
			for _, st := range c.s.streams {
				st.muted.Store(true) // before the server can have answered anything about the prompt
			}
			c.s.mu.Unlock()
			close(c.s.prompted)
		})
	}
	return c.Conn.Write(p)
}

func (c *mutedConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if !c.muted.Load() || err != nil {
			if c.muted.Load() {
				n = 0
			}
			return n, err
		}
	}
}

// TestServerRestartedBeforeTheRunShowedIsCut runs the real opencode server: the turn's event stream
// stalls as the prompt goes out (nothing of the run reaches the turn, not even busy), the server takes
// the prompt and starts the run (the model is asked), and is then killed and launched again, which
// ends the stream. The new server is idle and knows nothing of the run. The turn must end as cut
// (runtime.ErrPromptCut) by the start grace's look (errRunNotShown; the resume window is far longer
// than the test's bound, so its end cannot be what cut the turn), and the model must have got the
// prompt once; before, it followed the new server's stream, which never reports the run, until the
// watchdog. The resumption meets the server down, then starting (it accepts connections a moment
// before it answers them): a subscription that lands in that moment is given up and made again.
func TestServerRestartedBeforeTheRunShowedIsCut(t *testing.T) {
	p := runtimetest.Provider(t)
	sb, _ := runtimetest.NewSandbox(t, p, t.Name())
	fake := runtimetest.StartFake(t, sb, runtimetest.BuildFake(t), runtimetest.Script(sandbox.DefaultWorkDir))
	model := runtimetest.Model{URL: fake.URL, APIKey: "sk-tb-restart"}
	// Every connection of the runtime goes through ms: it keeps them per sandbox.
	ms := &mutingSandbox{Sandbox: sb, prompted: make(chan struct{})}
	rt := newForFake(t, model).(*Runtime)
	rt.startGrace, rt.resumeWindow = 2*time.Second, 10*time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute) // only so that a regression fails rather than hangs
	defer cancel()
	require.NoError(t, rt.Ensure(ctx, ms))
	sid, _, err := rt.Session(ctx, ms, "", "web:restart")
	require.NoError(t, err)

	const prompt = "Wait for the gate. TB-GATE"
	done := make(chan error, 1)
	go func() {
		_, err := rt.Prompt(ctx, ms, sid, runtime.Prompt{Text: prompt, Timeout: 2 * time.Minute}, nil)
		done <- err
	}()
	select {
	case <-ms.prompted:
	case err := <-done:
		require.FailNow(t, "the turn ended before its prompt went out", "%v", err)
	}
	asked := func() (int, error) {
		reqs, err := fake.Requests(ctx)
		n := 0
		for _, r := range reqs {
			if strings.Contains(r.Prompt, "TB-GATE") && !r.AfterTool {
				n++
			}
		}
		return n, err
	}
	require.NoError(t, runtimetest.Eventually(ctx, time.Minute, func() (bool, error) { n, err := asked(); return n > 0, err }),
		"the server started the run")

	// Killed, and launched again by another runtime (its own connections): the new server is idle.
	runtimetest.Sh(t, sb, `pkill -KILL -f "opencode serv[e] --port" ; while pgrep -f "opencode serv[e] --port" >/dev/null; do sleep 0.05; done`)
	require.NoError(t, newForFake(t, model).Ensure(ctx, sb))

	err = <-done
	require.ErrorIs(t, err, runtime.ErrPromptCut)
	require.ErrorIs(t, err, errRunNotShown, "cut by the start grace's look")
	require.Equal(t, runtime.ClassInterrupted, runtime.Classify(err), "%v", err)
	n, err := asked()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the model got the prompt once")
}
