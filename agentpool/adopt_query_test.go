package agentpool

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// rowCountStore counts the pending-turn rows the store hands the pool.
type rowCountStore struct {
	db.Store
	rows atomic.Int64
}

func (s *rowCountStore) TurnsPending(ctx context.Context, afterID int64, limit int) ([]db.Turn, error) {
	ts, err := s.Store.TurnsPending(ctx, afterID, limit)
	s.rows.Add(int64(len(ts)))
	return ts, err
}

func (s *rowCountStore) TurnsQueuedOwned(ctx context.Context, owner string, cutoff time.Time, afterID int64, limit int) ([]db.Turn, error) {
	ts, err := s.Store.TurnsQueuedOwned(ctx, owner, cutoff, afterID, limit)
	s.rows.Add(int64(len(ts)))
	return ts, err
}

// TestAdoptReadsOnlyItsOwnOldTurns: the adoption pass runs in every replica every interval; it reads
// only this replica's queued turns past the grace period, never the other replicas' pending turns
// (whose prompts may be large) nor its own young ones.
func TestAdoptReadsOnlyItsOwnOldTurns(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		other, err := st.HoldInstance(ctx, "other")
		require.NoError(t, err)
		defer other.Release()
		for i := range 5 {
			_, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: fmt.Sprintf("o%d", i), PlatformEventID: fmt.Sprintf("o%d", i),
				Prompt: "someone else's", Delivery: json.RawMessage(`{}`), Owner: "other"})
			require.NoError(t, err)
		}
		rs := &rowCountStore{Store: st}
		ls := &lostCommitStore{Store: rs, lose: map[string]bool{"e1": true}}
		sink := newCollector()
		p := newAdoptPool(t, ls, clock, &scriptRuntime{}, sink)
		_, err = p.Submit(ctx, Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello", Sink: sink, Delivery: json.RawMessage(`{}`)})
		require.ErrorIs(t, err, errLostCommit)
		clock.Advance(DefaultAdoptAfter + 1)
		_, err = st.TurnInsert(ctx, db.NewTurn{ThreadKey: "young", PlatformEventID: "young", Prompt: "within the grace",
			Delivery: json.RawMessage(`{}`), Owner: "live"})
		require.NoError(t, err)

		rep, err := p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{Adopted: 1}, rep)
		require.Equal(t, "echo: hello", sink.wait(t, 1)[0].Answer)
		require.EqualValues(t, 1, rs.rows.Load(), "only the orphan's row was read")
		require.NoError(t, p.Shutdown(ctx))
	})
}
