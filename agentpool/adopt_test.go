package agentpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// errLostCommit is what a client sees when its insert committed and the reply was lost.
var errLostCommit = errors.New("connection lost after commit")

// lostCommitStore commits a turn's insert and then, for the events in lose, reports an error;
// for the events in gate, it waits for the channel to close after the commit.
type lostCommitStore struct {
	db.Store
	mu   sync.Mutex
	lose map[string]bool
	gate map[string]chan struct{}
	// inserted is signalled after each committed insert that waits on a gate.
	inserted chan struct{}
}

func (s *lostCommitStore) TurnInsert(ctx context.Context, t db.NewTurn) (db.Turn, error) {
	tr, err := s.Store.TurnInsert(ctx, t)
	s.mu.Lock()
	lose, gate := s.lose[t.PlatformEventID], s.gate[t.PlatformEventID]
	delete(s.lose, t.PlatformEventID)
	s.mu.Unlock()
	if err != nil {
		return tr, err
	}
	if gate != nil {
		s.inserted <- struct{}{}
		<-gate
	}
	if lose {
		return db.Turn{}, errLostCommit
	}
	return tr, nil
}

// newAdoptPool builds a pool on st whose restored turns answer to sink, on the shared clock.
func newAdoptPool(t *testing.T, st db.Store, clock *dbtest.Clock, rt runtime.Runtime, sink Sink) *Pool {
	t.Helper()
	p, err := New(Config{Deployment: "test-adopt", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: rt, Instance: "live", Now: clock.Now,
		Logger: zaptest.NewLogger(t),
		Restore: func(_ context.Context, t db.Turn) (Request, error) {
			return Request{Platform: "test", UserID: t.UserID, Text: t.Prompt, Sink: sink}, nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

// TestAdoptRedeliveredLostCommitAtOnce: a turn whose insert committed but reported an error is
// refused; when the platform delivers the message to this process again, the duplicate is the
// stray turn itself, and Submit queues it at once with the live request. Later deliveries are
// duplicates, and nothing is left for the adoption pass.
func TestAdoptRedeliveredLostCommitAtOnce(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		ls := &lostCommitStore{Store: st, lose: map[string]bool{"e1": true}}
		restored := newCollector()
		p := newAdoptPool(t, ls, clock, &scriptRuntime{}, restored)
		sink := newCollector()
		req := Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello", Sink: sink, Delivery: json.RawMessage(`{}`)}

		_, err := p.Submit(ctx, req)
		require.ErrorIs(t, err, errLostCommit, "the bot refuses the message")
		tk, err := p.Submit(ctx, req)
		require.NoError(t, err, "the redelivery is the recorded turn, taken now")
		out := sink.wait(t, 1)[0]
		require.NoError(t, out.Err)
		require.Equal(t, tk.TurnID, out.TurnID)
		require.Equal(t, "echo: hello", out.Answer)
		require.NoError(t, p.q.wait(ctx))

		_, err = p.Submit(ctx, req)
		require.ErrorIs(t, err, db.ErrDuplicate, "answered: a later delivery is a duplicate")
		clock.Advance(DefaultAdoptAfter + 1)
		rep, err := p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep)
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, sink.got, "exactly one answer")
		require.Empty(t, restored.got, "nothing answered through a restored request")
	})
}

// TestAdoptLostCommitIsAnsweredOnce: a turn whose insert committed but reported an error is refused,
// its redelivery goes elsewhere (or never comes), and its owner is alive, so recovery never takes
// it. The pool's adoption pass answers it, once.
func TestAdoptLostCommitIsAnsweredOnce(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		ls := &lostCommitStore{Store: st, lose: map[string]bool{"e1": true}}
		sink := newCollector()
		p := newAdoptPool(t, ls, clock, &scriptRuntime{}, sink)
		req := Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello", Sink: sink, Delivery: json.RawMessage(`{}`)}

		_, err := p.Submit(ctx, req)
		require.ErrorIs(t, err, errLostCommit, "the bot refuses the message")

		rep, err := p.RecoverPass(ctx)
		require.NoError(t, err)
		require.Equal(t, RecoverReport{}, rep, "recovery leaves a live owner's turns alone")

		rep2, err := p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep2, "within the grace period nothing is adopted")

		clock.Advance(DefaultAdoptAfter + 1)
		rep2, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{Adopted: 1}, rep2)
		out := sink.wait(t, 1)[0]
		require.NoError(t, out.Err)
		require.Equal(t, "echo: hello", out.Answer)
		require.NoError(t, p.q.wait(ctx))

		rep2, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep2, "an answered turn is not adopted again")
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, sink.got, "exactly one answer")
	})
}

// TestAdoptSkipsTurnsHeldHere: a turn whose Submit is between its insert and its enqueue, and a turn
// waiting in its thread's queue, are both queued, ours and old; neither is adopted, and each is
// answered once.
func TestAdoptSkipsTurnsHeldHere(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		gate := make(chan struct{})
		ls := &lostCommitStore{Store: st, gate: map[string]chan struct{}{"e2": gate}, inserted: make(chan struct{})}
		sink := newCollector()
		// The first turn blocks in its prompt, so the second waits in the queue, still queued.
		release := make(chan struct{})
		rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
			if p.Text == "first" {
				<-release
			}
			return runtime.Result{Answer: "echo: " + p.Text}, nil
		}}
		p := newAdoptPool(t, ls, clock, rt, sink)
		mk := func(ev, text string) Request {
			return Request{ThreadKey: "k", Platform: "test", EventID: ev, Text: text, Sink: sink, Delivery: json.RawMessage(`{}`)}
		}
		_, err := p.Submit(ctx, mk("e0", "first"))
		require.NoError(t, err)
		tk, err := p.Submit(ctx, mk("e1", "second"))
		require.NoError(t, err)
		require.Equal(t, 1, tk.Ahead)
		_, err = p.Submit(ctx, mk("e1", "second"))
		require.ErrorIs(t, err, db.ErrDuplicate, "queued here: a second delivery is a duplicate")

		submitted := make(chan error, 1)
		go func() { _, err := p.Submit(ctx, mk("e2", "third")); submitted <- err }()
		<-ls.inserted // e2 is recorded; its Submit has not queued it yet

		clock.Advance(DefaultAdoptAfter + 1)
		rep, err := p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep, "a queued turn and a turn being submitted are not orphans")

		close(gate)
		require.NoError(t, <-submitted)
		close(release)
		outs := sink.wait(t, 3)
		for i, want := range []string{"echo: first", "echo: second", "echo: third"} {
			require.Equal(t, want, outs[i].Answer)
		}
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, sink.got, "each answered once")
	})
}

// notPostedSink fails its first fails deliveries with ErrNotPosted (the chat was down), then
// collects.
type notPostedSink struct {
	*collector
	mu    sync.Mutex
	fails int
	tried chan Outcome
}

func (s *notPostedSink) Deliver(ctx context.Context, out Outcome) ([]string, error) {
	s.mu.Lock()
	fail := s.fails > 0
	if fail {
		s.fails--
	}
	s.mu.Unlock()
	if fail {
		s.tried <- out
		return nil, fmt.Errorf("slack: posting: %w", ErrNotPosted)
	}
	return s.collector.Deliver(ctx, out)
}

// TestRepostReplyThatDidNotReachTheChat: a finished turn whose reply did not get through at all
// stays undelivered, and its live owner's adoption pass posts it again after the grace period, once;
// one that keeps failing is given up after RepostFor.
func TestRepostReplyThatDidNotReachTheChat(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		sink := &notPostedSink{collector: newCollector(), fails: 1, tried: make(chan Outcome, 10)}
		p := newAdoptPool(t, st, clock, &scriptRuntime{}, sink)
		req := Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello", Sink: sink, Delivery: json.RawMessage(`{}`)}
		tk, err := p.Submit(ctx, req)
		require.NoError(t, err)
		require.Equal(t, "echo: hello", (<-sink.tried).Answer)
		require.NoError(t, p.q.wait(ctx))
		tr, err := st.TurnGet(ctx, tk.TurnID)
		require.NoError(t, err)
		require.True(t, tr.DeliveredAt.IsZero(), "a reply that never got through is not recorded as delivered")

		rep, err := p.RecoverPass(ctx)
		require.NoError(t, err)
		require.Equal(t, RecoverReport{}, rep, "recovery leaves a live owner's turns alone")
		rep2, err := p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep2, "within the grace period nothing is posted again")

		clock.Advance(DefaultAdoptAfter + 1)
		rep2, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{Reposted: 1}, rep2)
		out := sink.wait(t, 1)[0]
		require.Equal(t, tk.TurnID, out.TurnID)
		require.Equal(t, "echo: hello", out.Answer)
		require.True(t, out.Redelivered, "posted from the record")
		require.NoError(t, p.q.wait(ctx))
		tr, err = st.TurnGet(ctx, tk.TurnID)
		require.NoError(t, err)
		require.False(t, tr.DeliveredAt.IsZero())

		rep2, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep2, "a delivered reply is not posted again")

		// The chat stays down: after RepostFor the turn is given up, not tried for ever.
		sink.mu.Lock()
		sink.fails = 1000
		sink.mu.Unlock()
		tk2, err := p.Submit(ctx, Request{ThreadKey: "k", Platform: "test", EventID: "e2", Text: "again", Sink: sink, Delivery: json.RawMessage(`{}`)})
		require.NoError(t, err)
		<-sink.tried
		require.NoError(t, p.q.wait(ctx))
		clock.Advance(DefaultAdoptAfter + 1)
		rep2, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{Reposted: 1}, rep2)
		<-sink.tried
		require.NoError(t, p.q.wait(ctx))
		clock.Advance(RepostFor)
		rep2, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep2)
		tr, err = st.TurnGet(ctx, tk2.TurnID)
		require.NoError(t, err)
		require.False(t, tr.DeliveredAt.IsZero(), "given up: recorded as delivered")
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, sink.got, "exactly one answer for the first turn")
	})
}

// TestRepostIsPostedOnceWhenTwoPassesQueueIt: a recorded reply queued for posting behind a long job
// on its thread can be queued a second time before the first post runs (recovery queued a dead
// process's turn, which is now this process's, and the adoption pass finds it still undelivered;
// or the adoption pass queued it and another replica's recovery claimed it meanwhile). Each post
// checks, under the thread's lock, that the turn is still this process's and still undelivered:
// the reply is posted once.
func TestRepostIsPostedOnceWhenTwoPassesQueueIt(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		sink := newCollector()
		p := newAdoptPool(t, st, clock, &scriptRuntime{}, sink)
		tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e1", UserID: "u", Prompt: "p",
			Delivery: json.RawMessage(`{}`), Owner: "dead"})
		require.NoError(t, err)
		_, err = st.TurnFinish(ctx, tr.ID, db.TurnResult{Status: db.TurnDone, Answer: "the answer"})
		require.NoError(t, err)

		// A long job on the thread (a turn running) holds the queue.
		release, running := make(chan struct{}), make(chan struct{})
		require.NoError(t, p.Do("k", func(context.Context) { close(running); <-release }, nil))
		<-running

		rep, err := p.RecoverPass(ctx)
		require.NoError(t, err)
		require.Equal(t, RecoverReport{Redelivered: 1}, rep, "queued behind the long job")
		clock.Advance(DefaultAdoptAfter + 1)
		_, err = p.AdoptPass(ctx)
		require.NoError(t, err)

		close(release)
		require.NoError(t, p.q.wait(ctx))
		require.NoError(t, p.Shutdown(ctx))
		out := sink.wait(t, 1)[0]
		require.Equal(t, "the answer", out.Answer)
		require.Empty(t, sink.got, "posted once")
		got, err := st.TurnGet(ctx, tr.ID)
		require.NoError(t, err)
		require.False(t, got.DeliveredAt.IsZero())
	})
}

// TestAdoptRedeliveredOnlyTheSameMessage: after a lost commit, a message under the same event id
// with other words (a client reusing its key) is not adopted in place of the recorded one: it is a
// duplicate, and the recorded message is answered later by the adoption pass, as itself.
func TestAdoptRedeliveredOnlyTheSameMessage(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		ls := &lostCommitStore{Store: st, lose: map[string]bool{"e1": true}}
		restored := newCollector()
		p := newAdoptPool(t, ls, clock, &scriptRuntime{}, restored)
		sink := newCollector()
		req := Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello", Sink: sink, Delivery: json.RawMessage(`{}`)}
		_, err := p.Submit(ctx, req)
		require.ErrorIs(t, err, errLostCommit)

		other := req
		other.Text = "something else"
		_, err = p.Submit(ctx, other)
		require.ErrorIs(t, err, db.ErrDuplicate, "not the recorded message: not adopted")

		clock.Advance(DefaultAdoptAfter + 1)
		rep, err := p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{Adopted: 1}, rep)
		out := restored.wait(t, 1)[0]
		require.Equal(t, "echo: hello", out.Answer, "the recorded words run")
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, sink.got)
	})
}
