package agentpool

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// panickySink panics on the first Progress and/or the first Deliver, then records like a collector.
type panickySink struct {
	*collector
	progress, deliver atomic.Bool
}

func (s *panickySink) Progress(ev runtime.Event) {
	if s.progress.CompareAndSwap(true, false) {
		panic("sink progress blew up")
	}
	s.collector.Progress(ev)
}

func (s *panickySink) Deliver(ctx context.Context, out Outcome) ([]string, error) {
	if s.deliver.CompareAndSwap(true, false) {
		panic("sink deliver blew up")
	}
	return s.collector.Deliver(ctx, out)
}

// TestPanicInOneTurnNeitherKillsNorWedges: a panic in a runtime or a sink (code the pool does not
// own) used to unwind the thread's queue goroutine and kill the process, every thread's turns with
// it. Now the panicking turn is answered as failed (when its sink can still take the answer), its
// row is ended, and the thread's next turn runs.
func TestPanicInOneTurnNeitherKillsNorWedges(t *testing.T) {
	cases := []struct {
		name                     string
		promptPanics             bool
		progressPanics, delivers bool // delivers false: the first Deliver panics
		wantFirst                bool // the first turn's outcome reaches the sink
		wantStatus               db.TurnStatus
	}{
		{name: "runtime prompt panics", promptPanics: true, delivers: true, wantFirst: true, wantStatus: db.TurnFailed},
		{name: "sink progress panics", progressPanics: true, delivers: true, wantFirst: true, wantStatus: db.TurnDone},
		{name: "sink deliver panics", delivers: false, wantStatus: db.TurnDone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var first atomic.Bool
			first.Store(tc.promptPanics)
			rt := &scriptRuntime{}
			rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
				emit(runtime.Event{Kind: runtime.EventText, Text: "working"})
				if first.CompareAndSwap(true, false) {
					panic("runtime blew up")
				}
				return runtime.Result{Answer: "echo: " + p.Text}, nil
			}
			f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
			sink := &panickySink{collector: newCollector()}
			sink.progress.Store(tc.progressPanics)
			sink.deliver.Store(!tc.delivers)
			tk1 := submit(t, f.pool, "web:panic", "e1", "one", sink)
			submit(t, f.pool, "web:panic", "e2", "two", sink)
			n := 1
			if tc.wantFirst {
				n = 2
			}
			outs := sink.wait(t, n)
			if tc.wantFirst {
				require.Equal(t, tk1.TurnID, outs[0].TurnID)
				require.Equal(t, tc.wantStatus == db.TurnFailed, outs[0].Err != nil, "err: %v", outs[0].Err)
			}
			last := outs[len(outs)-1]
			require.NoError(t, last.Err)
			require.Equal(t, "echo: two", last.Answer, "the thread's next turn ran")
			require.NoError(t, f.pool.Shutdown(t.Context()))
			got, err := f.store.TurnGet(t.Context(), tk1.TurnID)
			require.NoError(t, err)
			require.Equal(t, tc.wantStatus, got.Status, "the panicking turn's row is ended, not left running")
		})
	}
}

// TestPanicInDoCallbackDoesNotWedgeTheThread: a command run on a thread's queue that panics must not
// kill the process or leave the thread's later work unrun.
func TestPanicInDoCallbackDoesNotWedgeTheThread(t *testing.T) {
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), &scriptRuntime{})
	ran := make(chan struct{})
	require.NoError(t, f.pool.Do("web:do", func(context.Context) { panic("command blew up") }, nil))
	require.NoError(t, f.pool.Do("web:do", func(context.Context) { close(ran) }, nil))
	<-ran
	require.NoError(t, f.pool.Shutdown(t.Context()))
	require.Zero(t, f.pool.Busy())
}
