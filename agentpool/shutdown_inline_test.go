package agentpool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestShutdownLeavesATurnInLineQueued: a turn waiting in line for a sandbox slot (max_active) has
// not started (recorded queued, no lock, nothing run), as a turn waiting on its thread's queue has
// not. At the end of the shutdown grace the one on the queue is left queued for the next process,
// which answers it; the one in line was recorded cancelled and its user asked to send it again.
// It is now left queued too, and owned by this process, so the next one takes it over.
func TestShutdownLeavesATurnInLineQueued(t *testing.T) {
	running := make(chan struct{})
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		close(running)
		<-ctx.Done()
		return runtime.Result{}, ctx.Err()
	}}
	st := newSQLiteStore(t)
	met := newRecordingMetrics()
	p, err := New(Config{Deployment: "test-shutdown-inline", Image: "img", MaxActive: 1}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: rt, Metrics: met,
	})
	require.NoError(t, err)
	a, b := newStatusSink(), newStatusSink()
	submit(t, p, "A", "e1", "slow", a)
	<-running // A holds the only slot
	tb := submit(t, p, "B", "e2", "waits", b)
	for line := range b.seen {
		if line == NoteInLine+" 1 of max 1" {
			break
		}
	}

	grace, cancel := context.WithCancel(t.Context())
	cancel() // the grace is over
	require.Error(t, p.Shutdown(grace))

	require.ErrorIs(t, a.wait(t, 1)[0].Err, ErrInterrupted, "the running one was cut")
	require.Empty(t, b.outcomes, "the one in line is not answered here")
	requireLeftQueued(t, st, p, tb.TurnID)
	requireGaugesZero(t, met)
}

// requireLeftQueued requires turn id to be left queued and owned by p, for the next process to take
// over and answer.
func requireLeftQueued(t *testing.T, st db.Store, p *Pool, id int64) {
	t.Helper()
	tr, err := st.TurnGet(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, db.TurnQueued, tr.Status, "left queued for the next process")
	require.Equal(t, p.instance, tr.Owner)
}
