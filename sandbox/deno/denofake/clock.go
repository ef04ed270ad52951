package denofake

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is a manual clock shared by the fake and the provider under test, so that the 30-minute
// lifetime can be crossed without waiting. Now starts at a fixed instant; Advance moves it, fires
// the timers that came due (in deadline order), and then lets the fake expire the sandboxes whose
// deadline has passed, before it returns: a test that advances past a deadline sees the sandbox
// stopped when Advance returns.
type Clock struct {
	mu     sync.Mutex // protects the following
	now    time.Time
	timers []clockTimer
	hooks  []func()
	armed  chan struct{} // closed and replaced whenever a timer is added
}

type clockTimer struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock set to start.
func NewClock(start time.Time) *Clock { return &Clock{now: start, armed: make(chan struct{})} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the time once the clock has been advanced by d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, clockTimer{at: c.now.Add(d), ch: ch})
	close(c.armed)
	c.armed = make(chan struct{})
	return ch
}

// AwaitTimers waits until at least n timers are waiting (a goroutine under test has armed its timer
// and can be moved on by Advance), or ctx ends.
func (c *Clock) AwaitTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		k, armed := len(c.timers), c.armed
		c.mu.Unlock()
		if k >= n {
			return nil
		}
		select {
		case <-armed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Timers reports how many timers are waiting (tests wait until a goroutine has armed its timer).
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves the clock by d, fires due timers, then runs the hooks (the fake's expiry pass).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	keep := c.timers[:0]
	var due []clockTimer
	for _, t := range c.timers {
		if t.at.After(now) {
			keep = append(keep, t)
		} else {
			due = append(due, t)
		}
	}
	c.timers = keep
	hooks := append([]func(){}, c.hooks...)
	c.mu.Unlock()
	for _, t := range due {
		t.ch <- now
	}
	for _, h := range hooks {
		h()
	}
}

func (c *Clock) onAdvance(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = append(c.hooks, f)
}
