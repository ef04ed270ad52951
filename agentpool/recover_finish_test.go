package agentpool

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

var errFinishLost = errors.New("connection reset while finishing")

// finishFailStore fails TurnFinish: the first fail calls, and with cancel set, it cancels the
// caller's pass at the last of them (the store stayed down for the whole pass).
type finishFailStore struct {
	db.Store
	mu     sync.Mutex
	fail   int
	cancel context.CancelFunc
}

func (s *finishFailStore) TurnFinish(ctx context.Context, id int64, r db.TurnResult) (db.Turn, error) {
	s.mu.Lock()
	failing := s.fail > 0
	if failing {
		s.fail--
		if s.fail == 0 && s.cancel != nil {
			s.cancel()
		}
	}
	s.mu.Unlock()
	if failing {
		return db.Turn{}, errFinishLost
	}
	return s.Store.TurnFinish(ctx, id, r)
}

// TestRecoverInterruptedFinishFails: recovery has claimed a dead process's running turn and the
// write finishing it as interrupted fails. The write is retried, or (the store down for the whole
// pass) the turn is handed back to its dead owner for the next pass; either way its user is told it
// was interrupted, once, and the record says so, instead of the turn staying running under this
// live process until the leader's watchdog fails it as "no progress".
func TestRecoverInterruptedFinishFails(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fail         int
		downAllPass  bool
		passesNeeded int
	}{
		{"first write fails", 1, false, 1},
		{"store down for the pass", 3, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := dbtest.OpenSQLite(t)
			ctx := t.Context()
			tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e", UserID: "u", Prompt: "long job",
				Delivery: json.RawMessage(`{}`), Owner: "dead"})
			require.NoError(t, err)
			_, err = st.TurnStart(ctx, tr.ID, "dead")
			require.NoError(t, err)

			fs := &finishFailStore{Store: st, fail: tc.fail}
			sink := newCollector()
			p, err := New(Config{Deployment: "test-rec", Image: "img"}, Deps{
				Store: fs, Provider: sandboxfake.New(), Runtime: &scriptRuntime{},
				Restore: func(_ context.Context, t db.Turn) (Request, error) {
					return Request{Platform: "test", UserID: t.UserID, Text: t.Prompt, Sink: sink}, nil
				},
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

			var total RecoverReport
			for pass := 1; pass <= tc.passesNeeded; pass++ {
				pctx, cancel := context.WithCancel(ctx)
				if tc.downAllPass && pass == 1 {
					fs.mu.Lock()
					fs.cancel = cancel
					fs.mu.Unlock()
				}
				rep, err := p.RecoverPass(pctx)
				cancel()
				if pass < tc.passesNeeded {
					require.Error(t, err)
					continue
				}
				require.NoError(t, err)
				total = rep
			}
			require.Equal(t, RecoverReport{Interrupted: 1}, total)
			out := sink.wait(t, 1)[0]
			require.ErrorIs(t, out.Err, ErrInterrupted)
			got, err := st.TurnGet(ctx, tr.ID)
			require.NoError(t, err)
			require.Equal(t, db.TurnFailed, got.Status)
			require.Equal(t, InterruptedText, got.Error)
			require.NoError(t, p.Shutdown(ctx))
			require.Empty(t, sink.got, "told once")
		})
	}
}
