package agentpool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestStartGate: n starts at once; the next waits until one is done or has held its place for the
// hold time; done after the hold is a no-op; a cancelled wait takes no place.
func TestStartGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newStartGate(2, 20*time.Millisecond)
		a, b := g.enter(t.Context()), g.enter(t.Context())
		require.NotNil(t, a)
		require.NotNil(t, b)

		entered := make(chan *startPass)
		go func() { entered <- g.enter(context.Background()) }()
		synctest.Wait()
		select {
		case <-entered:
			t.Fatal("a third start went in beside two")
		default:
		}
		a.done()
		c := <-entered
		require.NotNil(t, c, "a place given back is taken by the start waiting")

		// b and c hold their places past the hold time: the next start goes in then, not before.
		start := time.Now()
		go func() { entered <- g.enter(context.Background()) }()
		d := <-entered
		require.Equal(t, 20*time.Millisecond, time.Since(start), "the waiting start went in when the first place lapsed")
		require.NotNil(t, d)
		a.done() // twice: nothing more is given back
		b.done()
		c.done()
		d.done()
		require.Empty(t, g.slots, "every place was given back once")

		// Full, and the waiting turn is cancelled: no place, and done on it is harmless.
		full := []*startPass{g.enter(t.Context()), g.enter(t.Context())}
		ctx, cancel := context.WithCancel(t.Context())
		go func() { entered <- g.enter(ctx) }()
		synctest.Wait()
		cancel()
		none := <-entered
		require.Nil(t, none)
		none.done()
		require.Len(t, g.slots, 2, "the cancelled wait took nothing")
		for _, p := range full {
			p.done()
		}
	})
}

// TestTurnStartsWaitTheirPlace: with one place, a second thread's turn does not start while the
// first's start runs (it waits at the gate), and starts once the first has handed its prompt to
// the agent; a start that fails before its prompt gives its place back too.
func TestTurnStartsWaitTheirPlace(t *testing.T) {
	eachStore(t, func(t *testing.T, st db.Store) {
		var (
			mu    sync.Mutex
			order []string
		)
		note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
		aIn, aGo := make(chan struct{}), make(chan struct{})
		var letAGo sync.Once
		rt := &scriptRuntime{}
		first := true
		rt.ensureFunc = func(ctx context.Context) error {
			mu.Lock()
			isFirst := first
			first = false
			mu.Unlock()
			if !isFirst {
				note("B starts")
				return nil
			}
			note("A starts")
			close(aIn)
			<-aGo
			return nil
		}
		rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
			if p.Text == "a" {
				note("A prompted")
			}
			return runtime.Result{Answer: "echo: " + p.Text}, nil
		}
		f := newFixture(t, st, sandboxfake.New(), rt)
		// Registered after the fixture's, so it runs before the pool's shutdown, which waits for A.
		t.Cleanup(func() { letAGo.Do(func() { close(aGo) }) })
		bWaits := oneStartPlace(f.pool)

		sink := newCollector()
		submit(t, f.pool, "T:A", "ev-a", "a", sink)
		closedWithin(t, aIn, "A's start")
		submit(t, f.pool, "T:B", "ev-b", "b", sink)
		closedWithin(t, bWaits, "B waiting at the gate while A's start holds the place")
		letAGo.Do(func() { close(aGo) })
		outs := sink.wait(t, 2)
		for _, o := range outs {
			require.NoError(t, o.Err)
		}
		mu.Lock()
		require.Equal(t, []string{"A starts", "A prompted", "B starts"}, order)
		mu.Unlock()

		// A start that fails gives its place back: the next thread's turn is not left waiting.
		setEnsure := func(f func(context.Context) error) { rt.mu.Lock(); rt.ensureFunc = f; rt.mu.Unlock() }
		setEnsure(func(context.Context) error { return errors.New("agent will not start") })
		submit(t, f.pool, "T:C", "ev-c", "c", sink)
		require.Error(t, sink.wait(t, 1)[0].Err)
		setEnsure(nil)
		submit(t, f.pool, "T:D", "ev-d", "d", sink)
		require.NoError(t, sink.wait(t, 1)[0].Err)
	})
}

// closedWithin fails the test unless ch is closed within a minute (a hang is a failure, not a
// timeout of the whole run).
func closedWithin(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("waited a minute for %s", what)
	}
}

// TestShutdownLeavesATurnAtTheGateQueued: a turn waiting at the start gate has not started (recorded
// queued, nothing run), as one waiting for its thread's lock or a sandbox slot has not. Cut by the
// end of the shutdown grace, it is left queued for the next process, not recorded cancelled and its
// user told the bot is shutting down (their message lost).
func TestShutdownLeavesATurnAtTheGateQueued(t *testing.T) {
	aIn := make(chan struct{})
	var first sync.Once
	rt := &scriptRuntime{ensureFunc: func(ctx context.Context) error {
		isFirst := false
		first.Do(func() { isFirst = true })
		if !isFirst {
			return nil
		}
		close(aIn)
		<-ctx.Done() // A's start holds the only place until the grace ends
		return context.Cause(ctx)
	}}
	st := newSQLiteStore(t)
	met := newRecordingMetrics()
	p, err := New(Config{Deployment: "test-shutdown-gate", Image: "img"}, Deps{
		Store: st, Provider: sandboxfake.New(), Runtime: rt, Metrics: met,
	})
	require.NoError(t, err)
	bWaits := oneStartPlace(p)

	a, b := newCollector(), newCollector()
	submit(t, p, "A", "e1", "a", a)
	closedWithin(t, aIn, "A's start")
	tb := submit(t, p, "B", "e2", "b", b)
	closedWithin(t, bWaits, "B waiting at the gate")

	grace, cancel := context.WithCancel(t.Context())
	cancel() // the grace is over
	require.Error(t, p.Shutdown(grace))

	require.ErrorIs(t, a.wait(t, 1)[0].Err, ErrInterrupted, "A's start was cut")
	require.Empty(t, b.outcomes, "the turn at the gate is not answered here")
	requireLeftQueued(t, st, p, tb.TurnID)
	require.Len(t, rt.recorded(), 0, "nothing was prompted")
	requireGaugesZero(t, met)
}

// blockingSink is a Sink whose Deliver tells delivering, then waits for release.
type blockingSink struct {
	*collector
	delivering chan struct{}
	release    chan struct{}
}

func (s *blockingSink) Deliver(ctx context.Context, out Outcome) ([]string, error) {
	close(s.delivering)
	<-s.release
	return s.collector.Deliver(ctx, out)
}

// TestFailedStartGivesItsPlaceBackBeforeItsReply: a start that fails before its prompt is over
// when it fails; it does not keep its place while its failure is recorded and posted to the chat (a
// round trip to the chat's API, not the CPU's work), so the next thread's start does not wait for
// that post.
func TestFailedStartGivesItsPlaceBackBeforeItsReply(t *testing.T) {
	eachStore(t, func(t *testing.T, st db.Store) {
		var failing atomic.Bool
		failing.Store(true)
		rt := &scriptRuntime{ensureFunc: func(context.Context) error {
			if failing.Load() {
				return errors.New("agent will not start")
			}
			return nil
		}}
		f := newFixture(t, st, sandboxfake.New(), rt)
		a := &blockingSink{collector: newCollector(), delivering: make(chan struct{}), release: make(chan struct{})}
		var letADeliver sync.Once
		release := func() { letADeliver.Do(func() { close(a.release) }) }
		t.Cleanup(release) // before the pool's shutdown, which waits for A
		var waited atomic.Bool
		f.pool.starts = newStartGate(1, time.Hour)
		f.pool.starts.onWait = func() {
			waited.Store(true)
			release() // or the test would hang: A keeps its place until its post ends
		}

		submit(t, f.pool, "T:A", "ev-a", "a", a)
		closedWithin(t, a.delivering, "A's failure being posted")
		failing.Store(false)
		b := newCollector()
		submit(t, f.pool, "T:B", "ev-b", "b", b)
		require.NoError(t, b.wait(t, 1)[0].Err, "B ran while A's failure was being posted")
		release()
		require.Error(t, a.wait(t, 1)[0].Err)
		require.False(t, waited.Load(), "B waited at the gate for A's post")
	})
}

// oneStartPlace gives p's start gate one place, held until the start is over however long it takes,
// and returns a channel closed when a start first has to wait for it.
func oneStartPlace(p *Pool) <-chan struct{} {
	waits := make(chan struct{})
	var once sync.Once
	p.starts = newStartGate(1, time.Hour)
	p.starts.onWait = func() { once.Do(func() { close(waits) }) }
	return waits
}
