package slack

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// verdict is a rate-limit decision.
type verdict struct {
	allowed bool
	// notify is true for exactly one refused message per scope and window (the first over the
	// limit): that one gets the polite reply, the rest are dropped quietly.
	notify bool
	// resetIn is how long until the window ends.
	resetIn time.Duration
}

// limiter counts messages per scope (a user or a channel) in fixed windows. With Redis the counters
// are shared by every replica (INCR, then EXPIRE on the window's key); without it, or when Redis
// fails, counters live in process.
type limiter struct {
	rdb    *redis.Client
	prefix string
	window time.Duration
	now    func() time.Time
	log    *zap.Logger

	// mu protects local.
	mu    sync.Mutex
	local map[string]localCount
}

type localCount struct {
	window int64
	n      int64
}

func newLimiter(rdb *redis.Client, prefix string, window time.Duration, now func() time.Time, log *zap.Logger) *limiter {
	return &limiter{rdb: rdb, prefix: prefix + "rl:", window: window, now: now, log: log, local: map[string]localCount{}}
}

// allow counts one message against scope's limit of max per window. max < 0 means no limit.
func (l *limiter) allow(ctx context.Context, scope string, max int) verdict {
	if max < 0 {
		return verdict{allowed: true}
	}
	now := l.now()
	w := now.UnixNano() / int64(l.window)
	resetIn := time.Duration((w+1)*int64(l.window) - now.UnixNano())
	n, err := l.count(ctx, scope, w)
	if err != nil {
		l.log.Warn("redis rate limit failed; counting in process only", zap.Error(err))
		n = l.countLocal(scope, w)
	}
	return verdict{allowed: n <= int64(max), notify: n == int64(max)+1, resetIn: resetIn}
}

func (l *limiter) count(ctx context.Context, scope string, w int64) (int64, error) {
	if l.rdb == nil {
		return l.countLocal(scope, w), nil
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	key := l.prefix + scope + ":" + strconv.FormatInt(w, 10)
	pipe := l.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	// Two windows of life: long enough for replicas with slightly different clocks, and the key
	// goes away by itself.
	pipe.Expire(ctx, key, 2*l.window)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return incr.Val(), nil
}

func (l *limiter) countLocal(scope string, w int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.local[scope]
	if c.window != w {
		c = localCount{window: w}
	}
	c.n++
	l.local[scope] = c
	if len(l.local) > 100_000 {
		// Old windows are dead weight: sweep them when the map grows.
		for k, v := range l.local {
			if v.window < w {
				delete(l.local, k)
			}
		}
	}
	return c.n
}
