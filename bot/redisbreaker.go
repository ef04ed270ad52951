package bot

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// redisCooldown is how long the ack path leaves Redis alone after a call failed. A hanging Redis
// costs each call its whole redisTimeout; without a pause, every event of a burst would wait it
// out (Socket Mode acks one event after another) and log its own warning.
const redisCooldown = 2 * time.Second

// redisBreaker tells the ack path whether to call Redis: after a failure it says no for
// redisCooldown, during which the in-process fallbacks decide alone; then one call tries again.
// It logs each change of state once, not each failed call.
type redisBreaker struct {
	now  func() time.Time
	log  *zap.Logger
	what string // "dedupe", "rate limit": in the log lines

	mu        sync.Mutex
	downUntil time.Time
	down      bool
}

// try reports whether to call Redis now. Once a pause is over, one caller probes: the others go
// on without Redis until its call ends (against a Redis still hanging, each would wait it out).
func (b *redisBreaker) try() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down {
		return true
	}
	if now := b.now(); !now.Before(b.downUntil) {
		b.downUntil = now.Add(redisCooldown) // the probe's: result decides what follows
		return true
	}
	return false
}

// result records how a call went.
func (b *redisBreaker) result(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err == nil && b.down:
		b.down = false
		b.log.Info("redis " + b.what + " is answering again; shared across replicas again")
	case err != nil:
		if !b.down {
			b.log.Warn("redis "+b.what+" failed; working in process only, trying Redis again every "+redisCooldown.String(), zap.Error(err))
		}
		b.down, b.downUntil = true, b.now().Add(redisCooldown)
	}
}

// errRedisPaused is a call not made: the breaker is open.
var errRedisPaused = errors.New("redis paused after a failure")
