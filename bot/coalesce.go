package bot

import (
	"context"
	"errors"
	"sync"
	"time"
)

// RateLimitedError is what a Replier returns when the platform said "slow down"; the coalescer waits
// RetryAfter before its next update instead of hammering.
type RateLimitedError struct {
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return "rate limited; retry after " + e.RetryAfter.String()
}

// Coalescer turns a stream of progress states into at most one update per interval, always ending
// with the last state. Update never blocks: sends happen on a timer goroutine, one at a time.
type Coalescer struct {
	interval time.Duration
	send     func(ctx context.Context, text string) error
	ctx      context.Context

	// mu protects the following.
	mu       sync.Mutex
	pending  string
	has      bool
	timer    *time.Timer
	sending  bool
	nextOK   time.Time // no send before this (interval, or a platform's Retry-After)
	idle     chan struct{}
	sent     int
	lastSent string
}

// NewCoalescer sends through send, at most once per interval. ctx bounds every send, and each send
// is also bounded by progressSendTimeout.
func NewCoalescer(ctx context.Context, interval time.Duration, send func(ctx context.Context, text string) error) *Coalescer {
	return &Coalescer{interval: interval, send: send, ctx: ctx}
}

// Update records the newest state; it is sent when the interval allows.
func (c *Coalescer) Update(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending, c.has = text, true
	c.scheduleLocked()
}

func (c *Coalescer) scheduleLocked() {
	if c.timer != nil || c.sending || !c.has {
		return
	}
	c.timer = time.AfterFunc(max(time.Until(c.nextOK), 0), c.fire)
}

func (c *Coalescer) fire() {
	c.mu.Lock()
	c.timer = nil
	if !c.has || c.sending {
		c.mu.Unlock()
		return
	}
	text := c.pending
	c.has, c.sending = false, true
	c.mu.Unlock()

	err := c.sendBounded(c.ctx, text)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.sending = false
	wait := c.interval
	var rl *RateLimitedError
	if errors.As(err, &rl) {
		wait = max(wait, rl.RetryAfter)
		if !c.has {
			// The state was not shown: offer it again after the wait.
			c.pending, c.has = text, true
		}
	} else if err == nil {
		c.sent++
		c.lastSent = text
	}
	c.nextOK = time.Now().Add(wait)
	if c.has {
		c.scheduleLocked()
	} else if c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// Flush waits for any in-flight send, then sends the newest unsent state now (ignoring the interval:
// the final state must not wait). It reports the send's error; after a refusal with a Retry-After,
// the next send waits for it.
func (c *Coalescer) Flush(ctx context.Context) error {
	c.mu.Lock()
	for c.sending {
		if c.idle == nil {
			c.idle = make(chan struct{})
		}
		idle := c.idle
		c.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	text, has := c.pending, c.has
	c.has = false
	if !has {
		c.mu.Unlock()
		return nil
	}
	// Marked as sending, so an Update racing the flush waits its turn instead of overtaking it.
	c.sending = true
	c.mu.Unlock()
	err := c.sendBounded(ctx, text)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sending = false
	wait := c.interval
	if rl, ok := errors.AsType[*RateLimitedError](err); ok {
		// Not offered again here: the caller is about to post its answer, which a send racing
		// it could follow or overwrite (Discord's @original). It updates again when done, and
		// that waits for the platform.
		wait = max(wait, rl.RetryAfter)
	} else if err == nil {
		c.sent++
		c.lastSent = text
	}
	c.nextOK = time.Now().Add(wait)
	if c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
	c.scheduleLocked()
	return err
}

// Sent reports how many updates went out, for tests and metrics.
func (c *Coalescer) Sent() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// progressSendTimeout bounds one progress edit. The contexts sends run under have no deadline of
// their own (the sink's is the turn's, made uncancellable; Deliver's is the pool's), and the API
// clients set no overall timeout: without this bound, one edit a platform never answers held the
// coalescer's in-flight send, and with it Flush and so the turn's answer, forever.
const progressSendTimeout = 30 * time.Second

// sendBounded sends one update within progressSendTimeout.
func (c *Coalescer) sendBounded(ctx context.Context, text string) error {
	ctx, cancel := context.WithTimeout(ctx, progressSendTimeout)
	defer cancel()
	return c.send(ctx, text)
}
