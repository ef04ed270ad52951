package agentpool

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// touch tells the store the turn is alive, for the leader's watchdog.
func (p *Pool) touch(turnID int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.store.TurnTouch(ctx, turnID)
}

// watch is a turn's in-process watchdog: it cancels the turn after StuckAfter without a sign of life,
// and every so often records liveness in the store (which the leader's watchdog reads). A sign of
// life is a runtime event, or a prompt of a runtime.ProcessBound runtime still in flight: its process
// is running, quiet or not (deploy/runbook.md, "Watchdog").
type watch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	sink   Sink
	touchT *time.Timer
	period time.Duration
	touch  func()
	// ticking is held by a tick in flight, so stop can wait for its store write to end.
	ticking sync.Mutex
	done    chan struct{}
	seen    atomic.Bool
	// processes counts prompts in flight whose running process counts as life.
	processes atomic.Int32
	after     time.Duration
	once      sync.Once

	// mu protects the following (set once, read by the timer's callback).
	mu    sync.Mutex
	timer *time.Timer
}

func newWatch(parent context.Context, after time.Duration, sink Sink, touch func()) *watch {
	ctx, cancel := context.WithCancelCause(parent)
	w := &watch{ctx: ctx, cancel: cancel, sink: sink, after: after, done: make(chan struct{})}
	w.mu.Lock()
	w.timer = time.AfterFunc(after, w.expired)
	w.mu.Unlock()
	// Liveness is written at most a few times per StuckAfter, never per event. A timer that re-arms
	// itself, rather than a ticker and a goroutine, so a turn waiting on its agent costs no goroutine
	// of its own (10,000 turns in flight hold 10,000 queue goroutines, not 20,000).
	w.period, w.touch = max(after/4, time.Second), touch
	w.mu.Lock()
	w.touchT = time.AfterFunc(w.period, w.tick)
	w.mu.Unlock()
	return w
}

// tick records liveness if there was a sign of life since the last tick, then re-arms.
func (w *watch) tick() {
	w.ticking.Lock()
	defer w.ticking.Unlock()
	select {
	case <-w.done:
		return
	default:
	}
	if w.seen.Swap(false) || w.processes.Load() > 0 {
		w.touch()
	}
	w.mu.Lock()
	select {
	case <-w.done:
	default:
		w.touchT.Reset(w.period)
	}
	w.mu.Unlock()
}

// expired runs after StuckAfter without an event: a running process of the turn keeps it alive for
// another StuckAfter, anything else is stuck.
func (w *watch) expired() {
	if w.processes.Load() > 0 {
		w.mu.Lock()
		w.timer.Reset(w.after)
		w.mu.Unlock()
		return
	}
	w.cancel(ErrStuck)
}

// processAlive marks a prompt of rt in flight, if rt is runtime.ProcessBound; the returned function
// ends the mark.
func (w *watch) processAlive(rt runtime.Runtime) (done func()) {
	if pb, ok := rt.(runtime.ProcessBound); !ok || !pb.PromptIsProcess() {
		return func() {}
	}
	w.processes.Add(1)
	var once sync.Once
	return func() { once.Do(func() { w.processes.Add(-1) }) }
}

func (w *watch) stop() {
	w.once.Do(func() {
		w.mu.Lock()
		w.timer.Stop()
		w.touchT.Stop()
		close(w.done) // under mu: tick re-arms only while done is open
		w.mu.Unlock()
		// A tick already past its check of done finishes its write first: nothing of the turn's
		// outlives it.
		w.ticking.Lock()
		w.cancel(nil)
		w.ticking.Unlock()
	})
}

// emitter returns a progress function for one prompt attempt.
func (w *watch) emitter() *attemptEmitter { return &attemptEmitter{w: w} }

// attemptEmitter forwards events until retired, so a superseded attempt (an old sandbox generation)
// cannot talk over the current one.
type attemptEmitter struct {
	w       *watch
	retired atomic.Bool
}

func (e *attemptEmitter) emit(ev runtime.Event) {
	if e.retired.Load() {
		return
	}
	e.w.mu.Lock()
	e.w.timer.Reset(e.w.after)
	e.w.mu.Unlock()
	e.w.seen.Store(true)
	e.w.sink.Progress(ev)
}

func (e *attemptEmitter) retire() { e.retired.Store(true) }
