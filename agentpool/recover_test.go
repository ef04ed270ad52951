package agentpool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// statusSink records the status events it is shown (statusLine of each), and signals each.
type statusSink struct {
	*collector
	mu       sync.Mutex
	statuses []string
	seen     chan string
}

// statusLine is a status event as the tests compare it: its note with the numbers, else its text.
func statusLine(ev runtime.Event) string {
	if ev.Note == NoteInLine {
		return fmt.Sprintf("%s %d of max %d", ev.Note, ev.Place, ev.Max)
	}
	if ev.Note != "" {
		return ev.Note
	}
	return ev.Text
}

func newStatusSink() *statusSink {
	return &statusSink{collector: newCollector(), seen: make(chan string, 100)}
}

func (s *statusSink) Progress(ev runtime.Event) {
	if ev.Kind == runtime.EventStatus {
		s.mu.Lock()
		s.statuses = append(s.statuses, statusLine(ev))
		s.mu.Unlock()
		select {
		case s.seen <- statusLine(ev):
		default:
		}
	}
	s.collector.Progress(ev)
}

// TestRecoverTakesOverDeadProcessTurns: a dead owner's running turn is answered as interrupted and
// never run again; its queued turns run, in order; a live owner's turns are left alone.
func TestRecoverTakesOverDeadProcessTurns(t *testing.T) {
	st := newSQLiteStore(t)
	ctx := t.Context()
	insert := func(event, prompt, owner string) db.Turn {
		tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k1", PlatformEventID: event, UserID: "u", Prompt: prompt,
			Delivery: json.RawMessage(`{"to":"k1"}`), Owner: owner})
		require.NoError(t, err)
		return tr
	}
	running := insert("e1", "long job", "dead")
	_, err := st.TurnStart(ctx, running.ID, "dead")
	require.NoError(t, err)
	insert("e2", "second", "dead")
	insert("e3", "third", "dead")
	live, err := st.HoldInstance(ctx, "alive")
	require.NoError(t, err)
	defer live.Release()
	insert("e4", "someone else's", "alive")

	sink := newCollector()
	var restored []int64
	rt := &scriptRuntime{}
	p, err := New(Config{Deployment: "test-rec", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: rt,
		Restore: func(_ context.Context, t db.Turn) (Request, error) {
			restored = append(restored, t.ID)
			return Request{Platform: "test", ChannelID: "c", UserID: t.UserID, Text: t.Prompt, Sink: sink}, nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	rep, err := p.RecoverPass(ctx)
	require.NoError(t, err)
	require.Equal(t, RecoverReport{Requeued: 2, Interrupted: 1}, rep)
	outs := sink.wait(t, 3)
	require.ErrorIs(t, outs[0].Err, ErrInterrupted, "the interrupted turn is answered first")
	require.Equal(t, "echo: second", outs[1].Answer)
	require.Equal(t, "echo: third", outs[2].Answer)
	for _, pr := range rt.recorded() {
		require.NotEqual(t, "long job", pr.Text, "an interrupted prompt never runs again on its own")
	}
	got, err := st.TurnGet(ctx, running.ID)
	require.NoError(t, err)
	require.Equal(t, db.TurnFailed, got.Status)
	require.Equal(t, InterruptedText, got.Error)
	mine, err := st.TurnsPending(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, mine, 1, "the live owner's turn is not touched")
	require.Equal(t, "alive", mine[0].Owner)

	rep, err = p.RecoverPass(ctx)
	require.NoError(t, err)
	require.Zero(t, rep, "a second pass finds nothing to take over")
}

// TestNewTurnTakesOverItsThreadFirst: with no recovery pass run yet, a new message in a thread a
// dead process owned runs only after that process's turns: the interrupted one is answered, the
// queued ones run, in order, then the new one. A live owner's turn is left alone.
func TestNewTurnTakesOverItsThreadFirst(t *testing.T) {
	// On PostgreSQL the new turn's thread is idle here, so it is recorded at intake (intake.go): the
	// dead process's unfinished turns keep it queued, and it takes the thread over as on SQLite.
	for name, open := range map[string]func(testing.TB) db.Store{
		"sqlite": newSQLiteStore, "postgres": func(t testing.TB) db.Store { return dbtest.OpenPostgres(t) },
	} {
		t.Run(name, func(t *testing.T) { testNewTurnTakesOverItsThreadFirst(t, open(t)) })
	}
}

func testNewTurnTakesOverItsThreadFirst(t *testing.T, st db.Store) {
	ctx := t.Context()
	insert := func(thread, event, prompt, owner string) db.Turn {
		tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: thread, PlatformEventID: event, UserID: "u", Prompt: prompt,
			Delivery: json.RawMessage(`{}`), Owner: owner})
		require.NoError(t, err)
		return tr
	}
	running := insert("k1", "e1", "long job", "dead")
	_, err := st.TurnStart(ctx, running.ID, "dead")
	require.NoError(t, err)
	insert("k1", "e2", "second", "dead")
	insert("k1", "e3", "third", "dead")
	insert("k2", "e4", "other thread", "dead")
	live, err := st.HoldInstance(ctx, "alive")
	require.NoError(t, err)
	defer live.Release()
	insert("k1", "e5", "a live replica's", "alive")

	sink := newCollector()
	rt := &scriptRuntime{}
	p, err := New(Config{Deployment: "test-takeover", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: rt,
		Restore: func(_ context.Context, t db.Turn) (Request, error) {
			return Request{Platform: "test", ChannelID: "c", UserID: t.UserID, Text: t.Prompt, Sink: sink}, nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	_, err = p.Submit(ctx, Request{ThreadKey: "k1", EventID: "e6", Platform: "test", ChannelID: "c", UserID: "u",
		Text: "fourth", Sink: sink})
	require.NoError(t, err)
	outs := sink.wait(t, 4)
	require.ErrorIs(t, outs[0].Err, ErrInterrupted, "the interrupted turn is answered first")
	require.Equal(t, "echo: second", outs[1].Answer)
	require.Equal(t, "echo: third", outs[2].Answer)
	require.Equal(t, "echo: fourth", outs[3].Answer)
	for _, pr := range rt.recorded() {
		require.NotEqual(t, "long job", pr.Text, "an interrupted prompt never runs again on its own")
	}
	left, err := st.TurnsPending(ctx, 0, 10)
	require.NoError(t, err)
	var owners []string
	for _, tr := range left {
		owners = append(owners, tr.ThreadKey+"/"+tr.Owner)
	}
	require.ElementsMatch(t, []string{"k2/dead", "k1/alive"}, owners, "another thread's turns wait for the recovery pass; a live owner's are not touched")
}

// TestQueueCap: a thread with MaxQueued turns waiting refuses the next one.
func TestQueueCap(t *testing.T) {
	gate := make(chan struct{})
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		<-gate
		return runtime.Result{Answer: p.Text}, nil
	}}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt, func(c *Config) { c.MaxQueued = 2 })
	sink := newCollector()
	submit(t, f.pool, "k", "e1", "one", sink)
	submit(t, f.pool, "k", "e2", "two", sink)
	_, err := f.pool.Submit(t.Context(), Request{ThreadKey: "k", EventID: "e3", Text: "three", Sink: sink})
	require.ErrorIs(t, err, ErrQueueFull)
	submit(t, f.pool, "other", "e4", "another thread is not affected", sink)
	close(gate)
	sink.wait(t, 3)
}

// TestCapacityLine: with MaxActive 1, a second thread waits in line while the first one's turn runs,
// is told its place, and runs once the first sandbox, now idle, is paused to make room.
func TestCapacityLine(t *testing.T) {
	gate, running := make(chan struct{}), make(chan struct{})
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		if p.Text == "slow" {
			close(running)
			select {
			case <-gate:
			case <-ctx.Done():
				return runtime.Result{}, ctx.Err()
			}
		}
		return runtime.Result{Answer: "echo: " + p.Text}, nil
	}}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt, func(c *Config) { c.MaxActive = 1 })
	a, b := newStatusSink(), newStatusSink()
	submit(t, f.pool, "A", "e1", "slow", a)
	<-running // A holds the only slot
	submit(t, f.pool, "B", "e2", "quick", b)
	for line := range b.seen {
		if line == NoteInLine+" 1 of max 1" {
			break
		}
	}
	close(gate)
	require.Equal(t, "echo: slow", a.wait(t, 1)[0].Answer)
	require.Equal(t, "echo: quick", b.wait(t, 1)[0].Answer, "B runs once a slot frees")
	sa, err := f.store.SessionGet(t.Context(), "A")
	require.NoError(t, err)
	require.Equal(t, db.SessionPaused, sa.Status, "the idle sandbox was paused to make room")
}

// TestCapacityLongLine: many new threads behind a small cap all run, each told its place once per
// change, and the head of the line is the only one that looks again (the others just wait their turn).
func TestCapacityLongLine(t *testing.T) {
	gate, running := make(chan struct{}), make(chan struct{})
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		if p.Text == "slow" {
			close(running)
			select {
			case <-gate:
			case <-ctx.Done():
				return runtime.Result{}, ctx.Err()
			}
		}
		return runtime.Result{Answer: "echo: " + p.Text}, nil
	}}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt, func(c *Config) { c.MaxActive = 1 })
	first := newStatusSink()
	submit(t, f.pool, "T0", "e0", "slow", first)
	<-running // T0 holds the only slot, busy: nobody can be evicted
	const n = 12
	sinks := make([]*statusSink, n)
	for i := range sinks {
		sinks[i] = newStatusSink()
		submit(t, f.pool, fmt.Sprintf("T%d", i+1), fmt.Sprintf("e%d", i+1), fmt.Sprint("quick ", i+1), sinks[i])
	}
	for _, s := range sinks { // every one of them is in line
		for line := range s.seen {
			if strings.HasPrefix(line, NoteInLine+" ") {
				break
			}
		}
	}
	close(gate)
	require.Equal(t, "echo: slow", first.wait(t, 1)[0].Answer)
	for i, s := range sinks {
		require.Equal(t, fmt.Sprint("echo: quick ", i+1), s.wait(t, 1)[0].Answer, "thread %d runs once its turn comes", i+1)
		s.mu.Lock()
		seen := map[string]bool{}
		for _, st := range s.statuses {
			require.False(t, seen[st], "a place is told once, not on every wake: %q", st)
			seen[st] = true
		}
		s.mu.Unlock()
	}
}

// TestLockLossCancelsTurn: on PostgreSQL, killing the connection that holds a running turn's
// thread lock (pg_terminate_backend) cancels that turn; it is never left running beside another.
func TestLockLossCancelsTurn(t *testing.T) {
	st := dbtest.OpenPostgres(t)
	started := make(chan struct{})
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, _ runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		close(started)
		<-ctx.Done()
		return runtime.Result{}, ctx.Err()
	}}
	f := newFixture(t, st, sandboxfake.New(), rt)
	sink := newCollector()
	submit(t, f.pool, "slack:T:C:lock", "e1", "hold", sink)
	<-started
	require.Equal(t, 1, dbtest.TerminateThreadLock(t, st, "slack:T:C:lock"), "one connection held the thread's lock")
	out := sink.wait(t, 1)[0]
	require.True(t, out.Cancelled)
	require.ErrorIs(t, out.Err, ErrLockLost)
}

// TestRecoverRedeliversWhatADeadProcessNeverPosted: a turn finished by a process that died before
// posting its outcome is posted again by a live one, once, from the record.
func TestRecoverRedeliversWhatADeadProcessNeverPosted(t *testing.T) {
	st := newSQLiteStore(t)
	ctx := t.Context()
	done, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k1", PlatformEventID: "e1", UserID: "u", Prompt: "p",
		Delivery: json.RawMessage(`{}`), Owner: "dead"})
	require.NoError(t, err)
	_, err = st.TurnFinish(ctx, done.ID, db.TurnResult{Status: db.TurnDone, Answer: "the answer"})
	require.NoError(t, err)
	posted, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k1", PlatformEventID: "e2", UserID: "u", Prompt: "p",
		Delivery: json.RawMessage(`{}`), Owner: "dead"})
	require.NoError(t, err)
	_, err = st.TurnFinish(ctx, posted.ID, db.TurnResult{Status: db.TurnDone, Answer: "already posted"})
	require.NoError(t, err)
	require.NoError(t, st.TurnMarkDelivered(ctx, posted.ID))

	sink := newCollector()
	p, err := New(Config{Deployment: "test-redeliver", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: &scriptRuntime{},
		Restore: func(_ context.Context, t db.Turn) (Request, error) { return Request{Sink: sink}, nil },
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	rep, err := p.RecoverPass(ctx)
	require.NoError(t, err)
	require.Equal(t, RecoverReport{Redelivered: 1}, rep)
	out := sink.wait(t, 1)[0]
	require.True(t, out.Redelivered)
	require.Equal(t, done.ID, out.TurnID)
	require.Equal(t, "the answer", out.Answer)
	require.NoError(t, p.Shutdown(ctx)) // the delivery job has run and recorded itself
	got, err := st.TurnGet(ctx, done.ID)
	require.NoError(t, err)
	require.False(t, got.DeliveredAt.IsZero(), "recorded as delivered: it is not posted a third time")
}
