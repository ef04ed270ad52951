package agentpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// loseHold is a Hold whose loss the test decides (the connection holding the lock died).
type loseHold struct {
	db.Hold
	ctx    context.Context
	cancel context.CancelFunc
	lost   chan struct{}
	once   sync.Once
}

func (h *loseHold) Lost() <-chan struct{}    { return h.lost }
func (h *loseHold) Context() context.Context { return h.ctx }
func (h *loseHold) lose()                    { h.once.Do(func() { close(h.lost); h.cancel() }) }
func (h *loseHold) Release()                 { h.Hold.Release(); h.lose() }

// takenOverStore: while this process starts a turn, the connections holding its locks die (its
// thread lock and its instance lock, which live on the lock pool together); another process,
// finding it dead and the thread free, claims the queued turn and starts running it.
type takenOverStore struct {
	db.Store
	// noticed: this process notices the loss of its thread lock (its ctx is cancelled with
	// ErrLockLost); otherwise the connections are half-open (a partition), the server has ended
	// them and freed the locks, and this process's start fails minutes later with a network error.
	noticed bool
	mu      sync.Mutex
	hold    *loseHold
}

func (s *takenOverStore) HoldThread(ctx context.Context, threadKey string) (db.Hold, error) {
	h, err := s.Store.HoldThread(ctx, threadKey)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	lh := &loseHold{Hold: h, ctx: hctx, cancel: cancel, lost: make(chan struct{})}
	s.mu.Lock()
	s.hold = lh
	s.mu.Unlock()
	return lh, nil
}

func (s *takenOverStore) TurnStartFirst(ctx context.Context, id int64, owner string) (db.Turn, error) {
	s.mu.Lock()
	h := s.hold
	s.mu.Unlock()
	if s.noticed {
		h.lose()
	}
	// The other process, "B", with the thread's lock now free and this owner's instance lock gone.
	bg := context.Background()
	if _, err := s.Store.TurnClaim(bg, id, owner, "B", db.TurnQueued); err != nil {
		return db.Turn{}, fmt.Errorf("test setup: claim: %w", err)
	}
	if _, err := s.Store.TurnStart(bg, id, "B"); err != nil {
		return db.Turn{}, fmt.Errorf("test setup: start: %w", err)
	}
	if !s.noticed {
		return db.Turn{}, errors.New("db: start turn 1: read tcp 10.0.0.2:41234->10.0.0.9:5432: read: connection timed out")
	}
	<-ctx.Done() // runTurn's ctx, cancelled with ErrLockLost
	return db.Turn{}, fmt.Errorf("db: start turn: %w", ctx.Err())
}

// TestLockLostStartDoesNotFinishAnotherProcessesTurn (from a review of 758f922): while this process
// starts a turn, its locks' connections end and another process claims the turn and runs it. The
// start fails (the loss noticed: the turn's ctx is cancelled; or not: half-open connections in a
// partition, a network error minutes later), and the turn's end is fenced to its owner
// (TurnResult.Owner): the turn stays the other process's, running, and this process says nothing,
// as runHeld does when its TurnStart meets another's claim. Unfenced, it recorded over the other's
// run and answered the user while the other one answered too.
func TestLockLostStartDoesNotFinishAnotherProcessesTurn(t *testing.T) {
	for _, noticed := range []bool{true, false} {
		t.Run(fmt.Sprintf("loss_noticed=%v", noticed), func(t *testing.T) {
			st := &takenOverStore{Store: newSQLiteStore(t), noticed: noticed}
			f := newFixture(t, st, sandboxfake.New(), &scriptRuntime{})
			sink := newCollector()
			tk := submit(t, f.pool, "web:lost-lock", "e1", "hi", sink)
			require.NoError(t, f.pool.Shutdown(context.Background())) // waits for the turn's goroutine
			turn, err := st.Store.TurnGet(context.Background(), tk.TurnID)
			require.NoError(t, err)
			require.Equal(t, "B", turn.Owner)
			sink.mu.Lock()
			delivered := append([]Outcome(nil), sink.outcomes...)
			sink.mu.Unlock()
			for _, o := range delivered {
				t.Logf("this process delivered: cancelled=%v err=%v", o.Cancelled, o.Err)
			}
			require.Equal(t, db.TurnRunning, turn.Status,
				"the other process's running turn was finished by this one (status %s, error %q)", turn.Status, turn.Error)
			require.Empty(t, delivered, "this process answered a turn another process runs")
		})
	}
}
