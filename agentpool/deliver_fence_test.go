package agentpool

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// gateSink is a Sink whose Deliver tells the test it was reached and waits for its go-ahead.
type gateSink struct {
	*collector
	reached chan struct{}
	proceed chan struct{}
}

func (s *gateSink) Deliver(ctx context.Context, out Outcome) ([]string, error) {
	close(s.reached)
	<-s.proceed
	return s.collector.Deliver(ctx, out)
}

// TestRecoverDoesNotRedeliverWhileTheOwnerPosts: replica A has recorded a turn's outcome and is
// posting it (its thread lock held), when the connection holding its instance lock dies. Replica B's
// recovery pass then sees A as dead and the turn as finished but undelivered. Claimed without the
// thread's lock, B posted the outcome a second time while A posted it too. Under the lock, B waits
// for A to release the thread, by when the turn is recorded as delivered.
func TestRecoverDoesNotRedeliverWhileTheOwnerPosts(t *testing.T) {
	for name, open := range fenceStores {
		t.Run(name, func(t *testing.T) { testRecoverDoesNotRedeliverWhileTheOwnerPosts(t, open(t)) })
	}
}

func testRecoverDoesNotRedeliverWhileTheOwnerPosts(t *testing.T, st db.Store) {
	ctx := t.Context()
	sinkA := &gateSink{collector: newCollector(), reached: make(chan struct{}), proceed: make(chan struct{})}
	a := fencePool(t, st, "A", sinkA) // A runs no recovery pass here: it restores nothing
	sinkB := newCollector()
	b := fencePool(t, st, "B", sinkB)

	tk := submit(t, a, "web:fence", "e1", "hi", sinkA)
	<-sinkA.reached
	a.releaseInstance() // its lock connection died: A looks dead to others, but posts on
	rep, err := b.RecoverPass(ctx)
	require.NoError(t, err)
	close(sinkA.proceed)
	require.Equal(t, tk.TurnID, sinkA.wait(t, 1)[0].TurnID)
	require.NoError(t, a.Shutdown(ctx))
	require.NoError(t, b.Shutdown(ctx)) // any delivery B queued has run
	require.Zero(t, rep.Redelivered, "B claimed the turn A is posting")
	sinkB.mu.Lock()
	defer sinkB.mu.Unlock()
	require.Empty(t, sinkB.outcomes, "the answer was posted twice")
}

// TestRecoveryPostsUnderTheThreadLock: replica A's recovery pass answers a dead process's turn (as
// interrupted, or posting its recorded outcome again) and is posting it, when the connection holding
// its instance lock dies. Replica B's pass then sees the turn as A's, finished and undelivered. A
// posting without the thread's lock (its claim's lock was let go once the post was queued) was
// answered over by B; posting under it, B waits for A to let go, by when the turn is delivered.
func TestRecoveryPostsUnderTheThreadLock(t *testing.T) {
	for name, open := range fenceStores {
		for _, left := range []string{"running", "finished"} {
			t.Run(name+"/"+left, func(t *testing.T) { testRecoveryPostsUnderTheThreadLock(t, open(t), left) })
		}
	}
}

func testRecoveryPostsUnderTheThreadLock(t *testing.T, st db.Store, left string) {
	ctx := t.Context()
	tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "web:fence", PlatformEventID: "e1", UserID: "u", Prompt: "p",
		Delivery: json.RawMessage(`{}`), Owner: "dead"})
	require.NoError(t, err)
	if left == "running" {
		_, err = st.TurnStart(ctx, tr.ID, "dead")
	} else {
		_, err = st.TurnFinish(ctx, tr.ID, db.TurnResult{Status: db.TurnDone, Answer: "the answer", Owner: "dead"})
	}
	require.NoError(t, err)

	sinkA := &gateSink{collector: newCollector(), reached: make(chan struct{}), proceed: make(chan struct{})}
	a := fencePool(t, st, "A", sinkA)
	sinkB := newCollector()
	b := fencePool(t, st, "B", sinkB)

	_, err = a.RecoverPass(ctx)
	require.NoError(t, err)
	<-sinkA.reached
	a.releaseInstance() // its lock connection died: A looks dead to others, but posts on
	rep, err := b.RecoverPass(ctx)
	require.NoError(t, err)
	close(sinkA.proceed)
	require.Equal(t, tr.ID, sinkA.wait(t, 1)[0].TurnID)
	require.NoError(t, a.Shutdown(ctx))
	require.NoError(t, b.Shutdown(ctx)) // any delivery B queued has run
	require.Zero(t, rep.Redelivered, "B claimed the turn A is posting")
	sinkB.mu.Lock()
	defer sinkB.mu.Unlock()
	require.Empty(t, sinkB.outcomes, "the outcome was posted twice")
}

// fenceStores are the stores the fence tests run on: on PostgreSQL each pool holds its locks on
// connections of its own, as replicas do.
var fenceStores = map[string]func(testing.TB) db.Store{
	"sqlite":   newSQLiteStore,
	"postgres": func(t testing.TB) db.Store { return dbtest.OpenPostgres(t) },
}

// fencePool is a replica named instance on st whose restored turns answer to sink.
func fencePool(t *testing.T, st db.Store, instance string, sink Sink) *Pool {
	t.Helper()
	p, err := New(Config{Deployment: "test-fence", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Instance: instance,
		Restore: func(context.Context, db.Turn) (Request, error) { return Request{Sink: sink}, nil }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}
