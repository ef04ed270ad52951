package bot

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Verdict is a rate-limit decision.
type Verdict struct {
	Allowed bool
	// Notify is true for exactly one refused message per scope and window (the first over the
	// limit): that one gets the polite reply, the rest are dropped quietly.
	Notify bool
	// Mark is true for the first refusals of a scope in a window, up to the limit again: each gets a
	// "skipped" mark so its sender knows what to send again. Past that (a flood), refusals cost no
	// call to the platform at all.
	Mark bool
	// ResetIn is how long until the window ends.
	ResetIn time.Duration
}

// Limiter counts messages per scope (a user or a channel) in fixed windows. With Redis the counters
// are shared by every replica (INCR, then EXPIRE on the window's key); without it, or when Redis
// fails, counters live in process.
type Limiter struct {
	rdb    *redis.Client
	prefix string
	window time.Duration
	now    func() time.Time
	log    *zap.Logger

	brk *redisBreaker

	// mu protects local.
	mu    sync.Mutex
	local map[string]localCount
}

type localCount struct {
	window int64
	n      int64
}

func NewLimiter(rdb *redis.Client, prefix string, window time.Duration, now func() time.Time, log *zap.Logger) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix + "rl:", window: window, now: now, log: log, local: map[string]localCount{},
		brk: &redisBreaker{now: now, log: log, what: "rate limit"}}
}

// Allow counts one message against scope's limit of max per window. max < 0 means no limit.
func (l *Limiter) Allow(ctx context.Context, scope string, max int) Verdict {
	if max < 0 {
		return Verdict{Allowed: true}
	}
	now := l.now()
	w := now.UnixNano() / int64(l.window)
	resetIn := time.Duration((w+1)*int64(l.window) - now.UnixNano())
	n, err := l.count(ctx, scope, w)
	if err != nil {
		n = l.countLocal(scope, w)
	}
	return Verdict{Allowed: n <= int64(max), Notify: n == int64(max)+1, Mark: n <= 2*int64(max)+1, ResetIn: resetIn}
}

func (l *Limiter) count(ctx context.Context, scope string, w int64) (int64, error) {
	if l.rdb == nil {
		return l.countLocal(scope, w), nil
	}
	if !l.brk.try() {
		return 0, errRedisPaused
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	key := l.prefix + scope + ":" + strconv.FormatInt(w, 10)
	pipe := l.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	// Two windows of life: long enough for replicas with slightly different clocks, and the key
	// goes away by itself.
	pipe.Expire(ctx, key, 2*l.window)
	_, err := pipe.Exec(ctx)
	l.brk.result(err)
	if err != nil {
		return 0, err
	}
	return incr.Val(), nil
}

func (l *Limiter) countLocal(scope string, w int64) int64 {
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

// RateLimit bounds how many messages the bot takes per fixed window. A user or channel over the limit
// gets one polite reply per window and is otherwise ignored until the window ends.
type RateLimit struct {
	// UserMessages per Window and user (negative disables).
	UserMessages int
	// ChannelMessages per Window and channel (negative disables).
	ChannelMessages int
	// Window is the fixed window.
	Window time.Duration
}

// Check applies the per-user then the per-channel limit to one message. Scopes name the user and
// the channel uniquely across platforms and workspaces ("u:T1:U1"); mention is how the notice
// addresses the user ("<@U1>" on Slack and Discord). It returns whether the message may go on and,
// for the first refusal of a scope in a window only, the polite notice to post (later refusals in
// the window get no notice, "" notice). mark says whether the refused message should carry the
// ReactSkipped mark: acknowledged means answered, so a refused message is marked as skipped rather
// than left looking unseen, except in a flood (see Verdict.Mark).
func (l *Limiter) Check(ctx context.Context, rl RateLimit, userScope, channelScope, mention string) (ok bool, notice string, mark bool) {
	checks := []struct {
		scope string
		max   int
		say   string
	}{
		{userScope, rl.UserMessages, fmt.Sprintf("%s, you have sent me more than %d messages in %s", mention, rl.UserMessages, SpellDuration(rl.Window))},
		{channelScope, rl.ChannelMessages, fmt.Sprintf("This channel has sent me more than %d messages in %s", rl.ChannelMessages, SpellDuration(rl.Window))},
	}
	for _, c := range checks {
		v := l.Allow(ctx, c.scope, c.max)
		if v.Allowed {
			continue
		}
		l.log.Info("rate limit: message dropped", zap.String("scope", c.scope))
		if v.Notify {
			notice = fmt.Sprintf("%s, so I am skipping messages for the next %s. Please send it again after that (I will only say this once).",
				c.say, SpellDuration(v.ResetIn.Round(time.Second)))
		}
		return false, notice, v.Mark
	}
	return true, "", false
}

// ExemptFromLimits lets in-thread control commands through the rate limit: a user who is over it
// must still be able to stop a runaway turn or ask what is going on.
func ExemptFromLimits(text string) bool {
	switch strings.ToLower(strings.TrimSpace(text)) {
	case CmdStop, CmdStatus, CmdHelp:
		return true
	}
	return false
}

// SpellDuration renders a duration for people: "1 minute", "5 minutes", "42 seconds", else Go's form.
func SpellDuration(d time.Duration) string {
	plural := func(n int64, unit string) string {
		if n == 1 {
			return "1 " + unit
		}
		return fmt.Sprintf("%d %ss", n, unit)
	}
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return plural(int64(d/time.Hour), "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return plural(int64(d/time.Minute), "minute")
	case d%time.Second == 0:
		return plural(int64(d/time.Second), "second")
	}
	return d.String()
}
