package agentpool

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// queuedIntake gives a store without a held intake (SQLite) one that records every turn queued
// (a nil hold, as the interface allows), so that the start-at-intake path runs; with panics set,
// its next call panics instead.
type queuedIntake struct {
	db.Store
	panics atomic.Bool
}

func (s *queuedIntake) TurnInsertHeld(ctx context.Context, nt db.NewTurn) (db.Turn, db.Hold, error) {
	if s.panics.CompareAndSwap(true, false) {
		panic("store blew up")
	}
	t, err := s.Store.TurnInsert(ctx, nt)
	return t, nil, err
}

// TestStartAtIntakePanicReleasesSlot: a panic while recording a turn at intake, after a sandbox
// slot was granted for it (max_active), kept the slot: the thread counted as live for good, and
// with max_active 1 every other thread's turn waited in line for ever. The slot is now given back.
func TestStartAtIntakePanicReleasesSlot(t *testing.T) {
	st := &queuedIntake{Store: newSQLiteStore(t)}
	st.panics.Store(true)
	met := newRecordingMetrics()
	p, err := New(Config{Deployment: "test-intake-panic", Image: "img", MaxActive: 1}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Metrics: met,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	_, err = p.Submit(t.Context(), Request{ThreadKey: "k1", Platform: "test", ChannelID: "c", UserID: "u",
		EventID: "e1", Text: "one", Sink: newCollector()})
	require.ErrorContains(t, err, "store blew up")
	require.NoError(t, p.q.wait(t.Context()))
	p.capa.mu.Lock()
	pending := len(p.capa.pending)
	p.capa.mu.Unlock()
	require.Zero(t, pending, "the slot granted to the refused turn is given back")

	sink := newCollector()
	submit(t, p, "k2", "e2", "two", sink)
	require.NoError(t, p.q.wait(t.Context()))
	require.Len(t, sink.outcomes, 1)
	require.Equal(t, "echo: two", sink.outcomes[0].Answer)
	requireGaugesZero(t, met)
}
