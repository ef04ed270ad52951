package deno

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// extendStub answers every extension with body, counting them.
type extendStub struct {
	body  func(now time.Time) string
	mu    sync.Mutex
	calls int
	spin  chan struct{} // past 20 calls, answers wait for it to close (so a spinning loop blocks)
}

func (s *extendStub) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if n > 20 {
		<-s.spin
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(s.body(time.Now()))), Request: r}, nil
}

func (s *extendStub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TestExtenderDoesNotSpin: when Deno grants no later deadline, or answers without stop_at_ms, the
// lease's extender asks again at a bounded rate (not in a tight loop), and a missing deadline keeps
// the one known (Sweep must not take it for 1970 and pause the box).
func TestExtenderDoesNotSpin(t *testing.T) {
	for name, body := range map[string]func(time.Time) string{
		"no stop_at_ms":  func(time.Time) string { return `{}` },
		"zero":           func(time.Time) string { return `{"stop_at_ms":0}` },
		"no later grant": func(now time.Time) string { return `{"stop_at_ms":` + itoa(now.Add(time.Minute).UnixMilli()) + `}` },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				stub := &extendStub{body: body, spin: make(chan struct{})}
				p, err := New(Options{Token: "ddo_stub", HTTPClient: &http.Client{Transport: stub}, Logger: zaptest.NewLogger(t)})
				require.NoError(t, err)
				deadline := time.Now().Add(6 * time.Minute)
				lv := &live{id: "box", region: "ord", conn: &rpcConn{sandboxID: "sbx", done: make(chan struct{})}, deadline: deadline}
				p.lives["box"] = lv
				release := p.lease(lv)
				t.Cleanup(func() { close(stub.spin); release() }) // also on failure: no goroutine left blocked
				time.Sleep(time.Minute)                           // into the extend margin: the first extension
				synctest.Wait()
				time.Sleep(5 * time.Minute) // up to the deadline, Deno never granting a later one
				synctest.Wait()
				require.LessOrEqual(t, stub.count(), 1+int(5*time.Minute/minExtendWait), "extensions at a bounded rate")
				require.GreaterOrEqual(t, stub.count(), 2, "still trying while the deadline nears")
				lv.mu.Lock()
				got := lv.deadline
				lv.mu.Unlock()
				require.False(t, got.Before(deadline), "the known deadline is kept: %s", got)
			})
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
