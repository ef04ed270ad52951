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

// Limiter counts messages per scope (a user or a channel) in fixed windows. A message is weighed
// against all its scopes at once: admitted, it counts against each; refused, it counts only against
// the scope that refused it, which is over its limit already (so the refusal spends no budget, and
// the count past the limit is what Verdict's Notify and Mark read). With Redis the counters are
// shared by every replica and moved together by one script; without it, or when Redis fails,
// counters live in process.
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

// scopeLimit is one scope of a message and its limit per window (negative: none, not counted).
type scopeLimit struct {
	scope string
	max   int
}

func NewLimiter(rdb *redis.Client, prefix string, window time.Duration, now func() time.Time, log *zap.Logger) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix + "rl:", window: window, now: now, log: log, local: map[string]localCount{},
		brk: &redisBreaker{now: now, log: log, what: "rate limit"}}
}

// Allow counts one message against scope's limit of max per window. max < 0 means no limit.
func (l *Limiter) Allow(ctx context.Context, scope string, max int) Verdict {
	_, v := l.take(ctx, []scopeLimit{{scope, max}})
	return v
}

// take weighs one message against scopes, in order: the first scope already at its limit refuses it
// (refused is its index, and only its count goes up); if none is, every limited scope counts it and
// refused is -1.
func (l *Limiter) take(ctx context.Context, scopes []scopeLimit) (refused int, v Verdict) {
	limited := make([]scopeLimit, 0, len(scopes))
	index := make([]int, 0, len(scopes)) // index[i] is limited[i]'s place in scopes
	for i, s := range scopes {
		if s.max >= 0 {
			limited, index = append(limited, s), append(index, i)
		}
	}
	if len(limited) == 0 {
		return -1, Verdict{Allowed: true}
	}
	now := l.now()
	w := now.UnixNano() / int64(l.window)
	v.ResetIn = time.Duration((w+1)*int64(l.window) - now.UnixNano())
	i, n, err := l.takeRedis(ctx, limited, w)
	if err != nil {
		i, n = l.takeLocal(limited, w)
	}
	if i < 0 {
		v.Allowed = true
		return -1, v
	}
	max := int64(limited[i].max)
	v.Notify, v.Mark = n == max+1, n <= 2*max+1
	return index[i], v
}

// takeScript is take on Redis, atomic across replicas. KEYS are the scopes' counters in order,
// ARGV[1] their lifetime in milliseconds, ARGV[i+1] the limit of KEYS[i]. It returns the 1-based
// index of the refusing key and its count, or {0, 0} when every key counted the message.
var takeScript = redis.NewScript(`
for i, key in ipairs(KEYS) do
  if (tonumber(redis.call('GET', key)) or 0) >= tonumber(ARGV[i + 1]) then
    local n = redis.call('INCR', key)
    redis.call('PEXPIRE', key, ARGV[1])
    return {i, n}
  end
end
for _, key in ipairs(KEYS) do
  redis.call('INCR', key)
  redis.call('PEXPIRE', key, ARGV[1])
end
return {0, 0}
`)

func (l *Limiter) takeRedis(ctx context.Context, scopes []scopeLimit, w int64) (refused int, n int64, err error) {
	if l.rdb == nil {
		refused, n = l.takeLocal(scopes, w)
		return refused, n, nil
	}
	if !l.brk.try() {
		return 0, 0, errRedisPaused
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	keys := make([]string, len(scopes))
	// Two windows of life: long enough for replicas with slightly different clocks, and the keys
	// go away by themselves.
	args := []any{(2 * l.window).Milliseconds()}
	for i, s := range scopes {
		keys[i] = l.prefix + s.scope + ":" + strconv.FormatInt(w, 10)
		args = append(args, s.max)
	}
	res, err := takeScript.Run(ctx, l.rdb, keys, args...).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("rate limit script answered %v", res)
	}
	l.brk.result(err)
	if err != nil {
		return 0, 0, fmt.Errorf("rate limit: %w", err)
	}
	return int(res[0]) - 1, res[1], nil
}

// takeLocal is take in process, with the same rule as takeScript.
func (l *Limiter) takeLocal(scopes []scopeLimit, w int64) (refused int, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	count := func(scope string) localCount {
		if c := l.local[scope]; c.window == w {
			return c
		}
		return localCount{window: w}
	}
	refused = -1
	for i, s := range scopes {
		if count(s.scope).n >= int64(s.max) {
			refused = i
			break
		}
	}
	for i, s := range scopes {
		if refused < 0 || i == refused {
			c := count(s.scope)
			c.n++
			l.local[s.scope], n = c, c.n
		}
	}
	if len(l.local) > 100_000 {
		// Old windows are dead weight: sweep them when the map grows.
		for k, v := range l.local {
			if v.window < w {
				delete(l.local, k)
			}
		}
	}
	if refused < 0 {
		n = 0
	}
	return refused, n
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

// Check applies the per-user and the per-channel limit to one message, together: a message either
// limit refuses spends neither's budget (see Limiter). Scopes name the user and
// the channel uniquely across platforms and workspaces ("u:T1:U1"); mention is how the notice
// addresses the user ("<@U1>" on Slack and Discord). It returns whether the message may go on and,
// for the first refusal of a scope in a window only, the polite notice to post (later refusals in
// the window get no notice, "" notice). mark says whether the refused message should carry the
// ReactSkipped mark: acknowledged means answered, so a refused message is marked as skipped rather
// than left looking unseen, except in a flood (see Verdict.Mark).
func (l *Limiter) Check(ctx context.Context, rl RateLimit, userScope, channelScope, mention string) (ok bool, notice string, mark bool) {
	refused, v := l.take(ctx, []scopeLimit{{userScope, rl.UserMessages}, {channelScope, rl.ChannelMessages}})
	if v.Allowed {
		return true, "", false
	}
	scope, say := userScope, fmt.Sprintf("%s, you have sent me more than %d messages in %s", mention, rl.UserMessages, SpellDuration(rl.Window))
	if refused == 1 {
		scope, say = channelScope, fmt.Sprintf("This channel has sent me more than %d messages in %s", rl.ChannelMessages, SpellDuration(rl.Window))
	}
	l.log.Info("rate limit: message dropped", zap.String("scope", scope))
	if v.Notify {
		notice = fmt.Sprintf("%s, so I am skipping messages for the next %s. Please send it again after that (I will only say this once).",
			say, SpellDuration(v.ResetIn.Round(time.Second)))
	}
	return false, notice, v.Mark
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
