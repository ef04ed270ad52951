package agentpool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// flakyEndStore loses its connection once while a turn's end is recorded, and once while its
// delivery is.
type flakyEndStore struct {
	db.Store
	finishFailed, markFailed atomic.Bool
}

var errConnLost = errors.New("db: finish turn: read tcp 10.0.0.2:41234->10.0.0.9:5432: read: connection reset by peer")

func (s *flakyEndStore) TurnFinish(ctx context.Context, id int64, r db.TurnResult) (db.Turn, error) {
	if s.finishFailed.CompareAndSwap(false, true) {
		return db.Turn{}, errConnLost
	}
	return s.Store.TurnFinish(ctx, id, r)
}

func (s *flakyEndStore) TurnMarkDelivered(ctx context.Context, id int64) error {
	if s.markFailed.CompareAndSwap(false, true) {
		return errConnLost
	}
	return s.Store.TurnMarkDelivered(ctx, id)
}

// TestTurnEndSurvivesALostConnection: a turn answered while the database connection drops is still
// recorded as done and delivered. Left running and undelivered, it would be answered a second time
// once this process is gone: as interrupted (and its user invited to run it again) by recovery.
func TestTurnEndSurvivesALostConnection(t *testing.T) {
	st := &flakyEndStore{Store: newSQLiteStore(t)}
	f := newFixture(t, st, sandboxfake.New(), &scriptRuntime{})
	sink := newCollector()
	tk := submit(t, f.pool, "web:f", "e1", "hello", sink)
	require.Equal(t, "echo: hello", sink.wait(t, 1)[0].Answer)
	require.NoError(t, f.pool.Shutdown(t.Context()))

	got, err := st.TurnGet(t.Context(), tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnDone, got.Status)
	require.False(t, got.DeliveredAt.IsZero(), "recorded as delivered: recovery never posts it again")
}
