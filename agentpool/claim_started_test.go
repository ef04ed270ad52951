package agentpool

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// startsBeforeClaimStore: between the recovery pass's listing and its claim, the owner, "A", starts
// the queued turn. A is alive, but its instance lock looked free (its connection was being replaced).
type startsBeforeClaimStore struct {
	db.Store
}

func (s startsBeforeClaimStore) TurnClaim(ctx context.Context, id int64, from, to string, status db.TurnStatus) (db.Turn, error) {
	if _, err := s.Store.TurnStart(ctx, id, "A"); err != nil {
		return db.Turn{}, err
	}
	return s.Store.TurnClaim(ctx, id, from, to, status)
}

// TestRecoverDoesNotClaimATurnStartedSinceListed: a queued turn that its owner started after the
// recovery pass listed it is not claimed as queued. Claimed, the owner's finish would be refused
// (not its turn any more: it says nothing), and the claimer could not start a running turn (taken
// over: it says nothing): the message would have run and never be answered.
func TestRecoverDoesNotClaimATurnStartedSinceListed(t *testing.T) {
	st := newSQLiteStore(t)
	ctx := t.Context()
	tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e1", Prompt: "job",
		Delivery: json.RawMessage(`{}`), Owner: "A"})
	require.NoError(t, err)
	sink := newCollector()
	p, err := New(Config{Deployment: "test-claim", Image: "img"}, Deps{
		Store: startsBeforeClaimStore{st}, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Instance: "B",
		Restore: func(_ context.Context, t db.Turn) (Request, error) {
			return Request{Platform: "test", UserID: t.UserID, Text: t.Prompt, Sink: sink}, nil
		}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	rep, err := p.RecoverPass(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Requeued)

	got, err := st.TurnGet(ctx, tr.ID)
	require.NoError(t, err)
	require.Equal(t, "A", got.Owner, "still the runner's")
	_, err = st.TurnFinish(ctx, tr.ID, db.TurnResult{Status: db.TurnDone, Answer: "ok", Owner: "A"})
	require.NoError(t, err, "the runner records its outcome, and answers")
}
