package agentpool

import (
	"context"
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
// On PostgreSQL the two pools hold their locks on connections of their own, as replicas do.
func TestRecoverDoesNotRedeliverWhileTheOwnerPosts(t *testing.T) {
	for name, open := range map[string]func(testing.TB) db.Store{
		"sqlite":   newSQLiteStore,
		"postgres": func(t testing.TB) db.Store { return dbtest.OpenPostgres(t) },
	} {
		t.Run(name, func(t *testing.T) { testRecoverDoesNotRedeliverWhileTheOwnerPosts(t, open(t)) })
	}
}

func testRecoverDoesNotRedeliverWhileTheOwnerPosts(t *testing.T, st db.Store) {
	ctx := t.Context()
	sinkA := &gateSink{collector: newCollector(), reached: make(chan struct{}), proceed: make(chan struct{})}
	a, err := New(Config{Deployment: "test-fence", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Instance: "A"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	sinkB := newCollector()
	b, err := New(Config{Deployment: "test-fence", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{}, Instance: "B",
		Restore: func(context.Context, db.Turn) (Request, error) { return Request{Sink: sinkB}, nil }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })

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
