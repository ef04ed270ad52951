package slack

import (
	"context"
	"sync"

	"github.com/threadbox/threadbox/bot"
)

// tasks tracks the adapter's own background work (slash commands that outlive their budget, notices
// that must not hold up an ack), so Close can refuse new work and wait for what runs. Messages are
// not queued here: the bot owns their ordered intake.
type tasks struct {
	// mu protects the following.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newTasks() *tasks { return &tasks{} }

// add runs f in the background. It reports false once close has been called.
func (q *tasks) add(f func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.wg.Go(f)
	return true
}

// isClosed reports whether close has been called.
func (q *tasks) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// close refuses new work; running work goes on.
func (q *tasks) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

// wait blocks until no work runs, or ctx ends.
func (q *tasks) wait(ctx context.Context) error { return bot.WaitGroupContext(ctx, &q.wg) }
