package agentpool

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// closingStore closes the pool's intake while a turn is being recorded: Shutdown begins between
// Submit's check and its enqueue.
type closingStore struct {
	db.Store
	pool *Pool
}

func (s *closingStore) TurnInsert(ctx context.Context, t db.NewTurn) (db.Turn, error) {
	tr, err := s.Store.TurnInsert(ctx, t)
	s.pool.q.close(true, ErrClosed)
	return tr, err
}

// TestSubmitRecordedThenClosedIsStillAnswered: a message recorded just as shutdown begins must not be
// refused. Refused, the platform delivers it again, and the second delivery is a duplicate of the
// recorded event, which is acknowledged and ignored: nobody would ever answer it. It stays queued,
// ours, and the next process answers it.
func TestSubmitRecordedThenClosedIsStillAnswered(t *testing.T) {
	st := newSQLiteStore(t)
	ctx := t.Context()
	cs := &closingStore{Store: st}
	p, err := New(Config{Deployment: "test-close", Image: "img"}, Deps{Store: cs, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Instance: "first"})
	require.NoError(t, err)
	cs.pool = p
	first := newCollector()
	tk, err := p.Submit(ctx, Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello", Sink: first,
		Delivery: json.RawMessage(`{}`)})
	require.NoError(t, err, "the message is recorded: refusing it would lose it")
	require.NoError(t, p.Shutdown(ctx))

	// The platform's redelivery, had the message been refused, is a duplicate.
	_, err = st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e1", Prompt: "hello", Owner: "x"})
	require.ErrorIs(t, err, db.ErrDuplicate)

	got, err := st.TurnGet(ctx, tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnQueued, got.Status, "left for the next process")

	next := newCollector()
	p2, err := New(Config{Deployment: "test-close", Image: "img"}, Deps{Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Instance: "second",
		Restore: func(_ context.Context, t db.Turn) (Request, error) {
			return Request{Platform: "test", UserID: t.UserID, Text: t.Prompt, Sink: next}, nil
		}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p2.Shutdown(context.Background()) })
	rep, err := p2.RecoverPass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Requeued)
	require.Equal(t, "echo: hello", next.wait(t, 1)[0].Answer)
}
