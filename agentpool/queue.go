package agentpool

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
)

// ErrClosed is returned by Submit after Shutdown has begun.
var ErrClosed = errors.New("agentpool: shutting down, not taking new turns")

// queues is a set of per-key serial queues (after tailscale's execqueue). A key with queued or
// running work has exactly one goroutine draining it; an idle key has no goroutine and no map entry,
// so ten thousand quiet threads cost nothing.
type queues struct {
	// base is the parent of every job's context; cancelling it cancels everything.
	base context.Context

	// mu protects the following.
	mu    sync.Mutex
	byKey map[string]*keyQueue
	// reserved counts, per key, places taken by reserve and not yet filled by an add or released:
	// a turn takes its place before it is recorded, so the cap holds across the store's write.
	reserved map[string]int
	closed   bool
	// idle is closed and replaced whenever the last key drains, so Wait can block without polling.
	idle chan struct{}
	busy int

	// onPanic, when set, hears of a job that panicked (the value, the stack); the queue goes on with
	// the key's next job.
	onPanic func(v any, stack []byte)
}

type keyQueue struct {
	pending []*job
	// running is the job being run, nil between jobs.
	running *job
}

type job struct {
	// id names the turn the job runs (0 for other work, and for a turn not recorded yet), so a
	// cancel can target one turn.
	id int64
	// turn marks a job that runs a user's turn, as opposed to other work on the thread's queue (a
	// reset's destroy, a provider move, an admin job, a recovered reply): stop cancels only turns.
	turn   bool
	run    func(ctx context.Context)
	drop   func(reason error) // called instead of run when the job is discarded unrun
	cancel context.CancelCauseFunc
}

func newQueues(base context.Context) *queues {
	return &queues{base: base, byKey: map[string]*keyQueue{}, reserved: map[string]int{}, idle: make(chan struct{})}
}

// add queues run under key and returns how many jobs are ahead of it (0: it starts now). id names the
// turn (0 for other work).
func (q *queues) add(key string, id int64, run func(context.Context), drop func(reason error)) (ahead int, err error) {
	return q.addInto(nil, key, id, run, drop)
}

// slot is a place on a key's queue held by reserve until an add fills it or release gives it up.
type slot struct {
	q    *queues
	key  string
	done bool // filled or released; guarded by q.mu
}

// reserve takes a place on key's queue if fewer than limit jobs run, wait or hold a place there. The
// check and the taking are one step under q.mu, so concurrent callers cannot all pass the check.
func (q *queues) reserve(key string, limit int) (*slot, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.depthLocked(key)+q.reserved[key] >= limit {
		return nil, false
	}
	q.reserved[key]++
	return &slot{q: q, key: key}, true
}

// release gives the place up if no add filled it; it is safe to call more than once.
func (s *slot) release() {
	if s == nil {
		return
	}
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	s.q.unreserveLocked(s)
}

func (q *queues) unreserveLocked(s *slot) {
	if s == nil || s.done {
		return
	}
	s.done = true
	if q.reserved[s.key]--; q.reserved[s.key] <= 0 {
		delete(q.reserved, s.key)
	}
}

// addInto is add, filling s (if not nil) in the same step, so the place is never counted twice.
func (q *queues) addInto(s *slot, key string, id int64, run func(context.Context), drop func(reason error)) (ahead int, err error) {
	ahead, _, err = q.push(s, key, &job{id: id, turn: id != 0, run: run, drop: drop}, false)
	return ahead, err
}

// addIfIdle queues run, a turn not recorded yet, under key only if key has no work, so that it
// starts now, filling s (if not nil) when it does, and reports whether it did. The job returned is
// for setID.
func (q *queues) addIfIdle(s *slot, key string, run func(context.Context), drop func(reason error)) (*job, bool, error) {
	j := &job{turn: true, run: run, drop: drop}
	_, ok, err := q.push(s, key, j, true)
	return j, ok, err
}

// setID names the turn j runs, for a job queued before its turn was recorded (addIfIdle), so that
// a cancel can target it.
func (q *queues) setID(j *job, id int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j.id = id
}

// push queues j under key (with onlyIfIdle, only if key has no work), filling s if it does, and
// starts the key's goroutine if it has none.
func (q *queues) push(s *slot, key string, j *job, onlyIfIdle bool) (ahead int, added bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		q.unreserveLocked(s)
		return 0, false, ErrClosed
	}
	kq := q.byKey[key]
	if kq != nil && onlyIfIdle {
		return 0, false, nil // the place stays held for the caller's add
	}
	q.unreserveLocked(s)
	if kq == nil {
		kq = &keyQueue{}
		q.byKey[key] = kq
	}
	ahead = len(kq.pending)
	if kq.running != nil {
		ahead++
	}
	kq.pending = append(kq.pending, j)
	if ahead == 0 {
		q.busy++
		go q.drain(key, kq)
	}
	return ahead, true, nil
}

// onQueueKey marks a job's context with the key whose queue runs it (see onThread).
type onQueueKey struct{}

// runningOn reports whether ctx is that of a job on key's queue.
func runningOn(ctx context.Context, key string) bool {
	k, ok := ctx.Value(onQueueKey{}).(string)
	return ok && k == key
}

// drain runs key's jobs in order and exits when none are left.
func (q *queues) drain(key string, kq *keyQueue) {
	for {
		q.mu.Lock()
		if len(kq.pending) == 0 {
			kq.running = nil
			delete(q.byKey, key)
			q.busy--
			if q.busy == 0 {
				close(q.idle)
				q.idle = make(chan struct{})
			}
			q.mu.Unlock()
			return
		}
		j := kq.pending[0]
		kq.pending[0] = nil
		kq.pending = kq.pending[1:]
		ctx, cancel := context.WithCancelCause(context.WithValue(q.base, onQueueKey{}, key))
		j.cancel = cancel
		kq.running = j
		q.mu.Unlock()

		q.run(j, ctx)
		cancel(nil)
	}
}

// run runs one job. A panic in it (code the pool does not own: a runtime, a sink, an admin command)
// ends that job only: unrecovered, it would kill the process and every thread's turns with it.
func (q *queues) run(j *job, ctx context.Context) {
	defer func() {
		if v := recover(); v != nil && q.onPanic != nil {
			q.onPanic(v, debug.Stack())
		}
	}()
	j.run(ctx)
}

// depth reports the jobs queued or running for key.
func (q *queues) depth(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depthLocked(key)
}

func (q *queues) depthLocked(key string) int {
	kq := q.byKey[key]
	if kq == nil {
		return 0
	}
	n := len(kq.pending)
	if kq.running != nil {
		n++
	}
	return n
}

// cancelRunning cancels key's running turn with cause, if a turn is what runs, and reports whether
// it did. With id non-zero it cancels only the job for that turn. Other work on the queue (a reset's
// destroy, a provider move, an admin job, a recovered reply) is never cut by it: a user's stop must
// not leave a half-done reset or move behind.
func (q *queues) cancelRunning(key string, id int64, cause error) bool {
	q.mu.Lock()
	kq := q.byKey[key]
	var cancel context.CancelCauseFunc
	if kq != nil && kq.running != nil && kq.running.turn && (id == 0 || kq.running.id == id) {
		cancel = kq.running.cancel
	}
	q.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel(cause)
	return true
}

// clear discards key's queued jobs (their drop runs with reason) and cancels the running one.
func (q *queues) clear(key string, reason error) {
	q.mu.Lock()
	var drops []*job
	var cancel context.CancelCauseFunc
	if kq := q.byKey[key]; kq != nil {
		drops, kq.pending = kq.pending, nil
		if kq.running != nil {
			cancel = kq.running.cancel
		}
	}
	q.mu.Unlock()
	if cancel != nil {
		cancel(reason)
	}
	for _, j := range drops {
		if j.drop != nil {
			j.drop(reason)
		}
	}
}

// activeKeys reports how many keys have work (each has one goroutine).
func (q *queues) activeKeys() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy
}

// close stops intake. With drain false it also discards queued jobs and cancels running ones; the
// discarded jobs' drop callbacks are returned for the caller to run (they may be slow: each tells a
// user), so it can run them concurrently under its own deadline.
func (q *queues) close(drain bool, reason error) []func() {
	q.mu.Lock()
	q.closed = true
	var drops []func()
	var cancels []context.CancelCauseFunc
	if !drain {
		for _, kq := range q.byKey {
			for _, j := range kq.pending {
				if j.drop != nil {
					drops = append(drops, func() { j.drop(reason) })
				}
			}
			kq.pending = nil
			if kq.running != nil {
				cancels = append(cancels, kq.running.cancel)
			}
		}
	}
	q.mu.Unlock()
	// Callbacks run outside the lock: they may call back into the pool.
	for _, c := range cancels {
		c(reason)
	}
	return drops
}

// isClosed reports whether intake has stopped (drain or shutdown).
func (q *queues) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// wait blocks until no key has work, or ctx ends.
func (q *queues) wait(ctx context.Context) error {
	for {
		q.mu.Lock()
		if q.busy == 0 {
			q.mu.Unlock()
			return nil
		}
		idle := q.idle
		q.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
