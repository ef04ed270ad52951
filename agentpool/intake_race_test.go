package agentpool

import (
	"context"
	"sync"
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

// heldSQLite gives SQLite a held intake (insert, take the thread's lock, start) and stops its first
// SessionsLive (the slot check before the intake) until gate is closed, telling entered.
type heldSQLite struct {
	db.Store
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (s *heldSQLite) SessionsLive(ctx context.Context, threadKey string, limit int) ([]string, error) {
	s.once.Do(func() { close(s.entered); <-s.gate })
	return s.Store.SessionsLive(ctx, threadKey, limit)
}

func (s *heldSQLite) TurnInsertHeld(ctx context.Context, nt db.NewTurn) (db.Turn, db.Hold, error) {
	t, err := s.Store.TurnInsert(ctx, nt)
	if err != nil {
		return db.Turn{}, nil, err
	}
	h, err := s.Store.HoldThread(ctx, nt.ThreadKey)
	if err != nil {
		return t, nil, nil
	}
	if t, err = s.Store.TurnStartFirst(ctx, t.ID, nt.Owner); err != nil {
		h.Release()
		return db.Turn{}, nil, err
	}
	return t, h, nil
}

// TestShutdownBeforeIntakeRecordLeavesItQueued: a message taken at intake whose job the end of the
// shutdown grace cut before it was recorded was still recorded started (the record is detached
// from the job, as it must be), then answered as interrupted, "send retry", though nothing had run.
// A job already cut records its turn queued: it is left for the next process, as a queued turn is.
func TestShutdownBeforeIntakeRecordLeavesItQueued(t *testing.T) {
	st := &heldSQLite{Store: newSQLiteStore(t), entered: make(chan struct{}), gate: make(chan struct{})}
	rt := &scriptRuntime{}
	p, err := New(Config{Deployment: "test-intake-shutdown", Image: "img", MaxActive: 5}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: rt,
	})
	require.NoError(t, err)
	sink := newCollector()
	done := make(chan Ticket, 1)
	go func() { done <- submit(t, p, "k", "e1", "one", sink) }()
	<-st.entered
	p.q.close(false, ErrClosed) // the grace ends: the job is cut
	close(st.gate)
	tk := <-done
	grace, cancel := context.WithCancel(t.Context())
	cancel()
	_ = p.Shutdown(grace)

	require.Empty(t, sink.outcomes, "not answered here")
	require.Empty(t, rt.recorded())
	tr, err := st.TurnGet(t.Context(), tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnQueued, tr.Status, "left queued for the next process")
}
