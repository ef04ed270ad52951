package slack

import (
	"context"
	"sync"
)

// queues runs accepted work after the ack: one serial queue per thread, so that messages of one
// thread reach the handler (and so the agent pool) in the order Slack delivered them, while
// different threads proceed in parallel. A key holds a goroutine only while it has work.
type queues struct {
	// mu protects the following.
	mu      sync.Mutex
	pending map[string][]func()
	closed  bool
	active  int
	idle    chan struct{} // closed when active drops to zero; nil while nobody waits
}

func newQueues() *queues { return &queues{pending: map[string][]func(){}} }

// add queues f behind key's earlier work. It reports false once close has been called.
func (q *queues) add(key string, f func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	list, running := q.pending[key]
	q.pending[key] = append(list, f)
	if !running {
		q.active++
		go q.run(key)
	}
	return true
}

func (q *queues) run(key string) {
	for {
		q.mu.Lock()
		list := q.pending[key]
		if len(list) == 0 {
			delete(q.pending, key)
			q.active--
			if q.active == 0 && q.idle != nil {
				close(q.idle)
				q.idle = nil
			}
			q.mu.Unlock()
			return
		}
		f := list[0]
		list[0] = nil
		q.pending[key] = list[1:]
		q.mu.Unlock()
		f()
	}
}

// closed reports whether close has been called.
func (q *queues) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// close refuses new work; queued work still runs.
func (q *queues) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

// wait blocks until no work is queued or running, or ctx ends.
func (q *queues) wait(ctx context.Context) error {
	q.mu.Lock()
	if q.active == 0 {
		q.mu.Unlock()
		return nil
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
	}
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// depth is how many keys have work (for tests and the benchmark).
func (q *queues) depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.active
}
