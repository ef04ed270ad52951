package bot_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/threadbox/threadbox/db/dbtest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/bot"
)

func TestTTLCache(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	c := bot.NewTTLCache(3, time.Minute, clock.Now)
	require.True(t, c.Add("a"))
	require.False(t, c.Add("a"), "seen")
	clock.Advance(59 * time.Second)
	require.False(t, c.Add("a"), "still within the TTL")
	clock.Advance(time.Second)
	require.True(t, c.Add("a"), "expired after the TTL")
	for _, k := range []string{"b", "c", "d"} {
		require.True(t, c.Add(k))
	}
	require.True(t, c.Add("a"), "the oldest entry was evicted at the size bound")
	c.Set("n", "ada")
	v, ok := c.Get("n")
	require.True(t, ok)
	require.Equal(t, "ada", v)
	c.Remove("n")
	_, ok = c.Get("n")
	require.False(t, ok)
}

// TestRedisDownFallsBack: a Redis that does not answer must not stop the bot: dedupe and limits
// carry on in process (and the store still dedupes turns).
func TestRedisDownFallsBack(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	log := zaptest.NewLogger(t)
	clock := &fakeClock{now: time.Unix(600, 0)}
	d := bot.NewDeduper(rdb, "p:", time.Hour, clock.Now, log)
	require.True(t, d.First(t.Context(), "ev:1"))
	require.False(t, d.First(t.Context(), "ev:1"))
	l := bot.NewLimiter(rdb, "p:", time.Minute, clock.Now, log)
	require.True(t, l.Allow(t.Context(), "u:1", 1).Allowed)
	v := l.Allow(t.Context(), "u:1", 1)
	require.False(t, v.Allowed)
	require.True(t, v.Notify)
	require.Equal(t, time.Minute, v.ResetIn)
	require.False(t, l.Allow(t.Context(), "u:1", 1).Notify, "only the first refusal is announced")
	require.True(t, l.Allow(t.Context(), "u:1", -1).Allowed, "a negative limit is off")
}

func TestRedisDedupeAndForget(t *testing.T) {
	rdb := dbtest.Redis(t)
	prefix := randomPrefix(t)
	log := zaptest.NewLogger(t)
	a := bot.NewDeduper(rdb, prefix, time.Minute, time.Now, log)
	b := bot.NewDeduper(rdb, prefix, time.Minute, time.Now, log)
	require.True(t, a.First(t.Context(), "ev:1"))
	require.False(t, b.First(t.Context(), "ev:1"), "another replica sees the mark")
	ttl, err := rdb.TTL(t.Context(), prefix+"seen:ev:1").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second, "marks expire (SET NX EX)")
	a.Forget(t.Context(), "ev:1")
	require.True(t, b.First(t.Context(), "ev:1"), "a withdrawn mark lets the redelivery in")
}

func TestSpell(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1 minute", 5 * time.Minute: "5 minutes", 42 * time.Second: "42 seconds",
		time.Hour: "1 hour", 90 * time.Second: "90 seconds", 1500 * time.Millisecond: "1.5s",
	} {
		require.Equal(t, want, bot.SpellDuration(d))
	}
}

func TestLimiterCheck(t *testing.T) {
	for _, impl := range limiterImpls {
		t.Run(impl.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(600, 0)}
			testLimiterCheck(t, bot.NewLimiter(impl.rdb(t), randomPrefix(t), time.Minute, clock.Now, zaptest.NewLogger(t)))
		})
	}
	require.True(t, bot.ExemptFromLimits(" Stop "))
	require.False(t, bot.ExemptFromLimits("stop the server"))
}

// limiterImpls are the two limiters: in process (no Redis, or Redis down) and on Redis.
var limiterImpls = []struct {
	name string
	rdb  func(t *testing.T) *redis.Client
}{
	{"in process", func(*testing.T) *redis.Client { return nil }},
	{"redis", func(t *testing.T) *redis.Client { return dbtest.Redis(t) }},
}

func testLimiterCheck(t *testing.T, l *bot.Limiter) {
	// A message refused per user is not counted against its channel.
	rl := bot.RateLimit{UserMessages: 1, ChannelMessages: 1, Window: time.Minute}
	steps := []struct {
		user, channel string
		ok            bool
		notice        string
		mark          bool // refusals are marked skipped up to the limit again, then (a flood) not
	}{
		{"u:1", "c:1", true, "", false},
		{"u:1", "c:1", false, "<@1>, you have sent me more than 1 messages in 1 minute, so I am skipping messages for the next 1 minute.", true},
		{"u:1", "c:1", false, "", true},
		{"u:1", "c:1", false, "", false},
		{"u:2", "c:1", false, "This channel has sent me more than 1 messages in 1 minute", true},
		{"u:3", "c:1", false, "", true},
		{"u:4", "c:1", false, "", false},
	}
	for i, s := range steps {
		ok, notice, mark := l.Check(t.Context(), rl, s.user, s.channel, "<@"+strings.TrimPrefix(s.user, "u:")+">")
		require.Equal(t, s.ok, ok, "step %d", i)
		require.Equal(t, s.mark, mark, "step %d: mark", i)
		if s.notice == "" {
			require.Empty(t, notice, "step %d", i)
		} else {
			require.Contains(t, notice, s.notice, "step %d", i)
		}
	}
}

// TestLimiterCheckRefusalCountsAgainstNeither: a message one limit refuses spends no budget of the
// other. Before, the user was counted first, so a busy channel used up its users' own limits (and a
// channel refusal in one channel shut the user out of every other). Both the Redis limiter and the
// in-process one (no Redis, or Redis down) must agree.
func TestLimiterCheckRefusalCountsAgainstNeither(t *testing.T) {
	rl := bot.RateLimit{UserMessages: 2, ChannelMessages: 1, Window: time.Minute}
	steps := []struct {
		user, channel string
		ok            bool
		why           string
	}{
		{"u:1", "c:1", true, "the first message: both limits admit it"},
		{"u:1", "c:1", false, "the channel is full"},
		{"u:1", "c:1", false, "the channel is still full"},
		{"u:1", "c:2", true, "the channel's refusals spent none of the user's 2"},
		{"u:1", "c:3", false, "now the user is over"},
		{"u:2", "c:3", true, "the user's refusal spent none of c:3's 1"},
		{"u:3", "c:3", false, "c:3 is full now"},
	}
	for _, impl := range limiterImpls {
		t.Run(impl.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(600, 0)}
			l := bot.NewLimiter(impl.rdb(t), randomPrefix(t), time.Minute, clock.Now, zaptest.NewLogger(t))
			for i, s := range steps {
				ok, _, _ := l.Check(t.Context(), rl, s.user, s.channel, "<@x>")
				require.Equal(t, s.ok, ok, "step %d: %s", i, s.why)
			}
		})
	}
}

func randomPrefix(t testing.TB) string {
	return fmt.Sprintf("tbtest:%s:%d:", t.Name(), time.Now().UnixNano())
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// flakyRedis answers every command without a server, or fails them all while down, and counts them.
type flakyRedis struct {
	mu    sync.Mutex
	down  bool
	calls int
	// gate, when set, holds the next call until closed; entered is closed when it arrives.
	gate, entered chan struct{}
}

var errRedisHung = errors.New("i/o timeout")

func (h *flakyRedis) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *flakyRedis) answer(cmds ...redis.Cmder) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate != nil { // hold this call until the test lets go
		gate, entered := h.gate, h.entered
		h.gate = nil
		close(entered)
		h.mu.Unlock()
		<-gate
		h.mu.Lock()
	}
	h.calls++
	if h.down {
		return errRedisHung
	}
	for _, c := range cmds {
		switch c := c.(type) {
		case *redis.BoolCmd:
			c.SetVal(true)
		case *redis.IntCmd:
			c.SetVal(1)
		case *redis.Cmd: // the rate limit's script: every key counted the message
			c.SetVal([]any{int64(0), int64(0)})
		}
	}
	return nil
}

func (h *flakyRedis) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error { return h.answer(cmd) }
}

func (h *flakyRedis) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error { return h.answer(cmds...) }
}

func (h *flakyRedis) set(down bool) (calls int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down, calls = down, h.calls
	h.calls = 0
	return calls
}

// TestRedisFailurePausesIt: after a failed call, dedupe and rate limits leave Redis alone for a
// cool-down (a hanging Redis would cost every event of a burst its timeout, and log a line each),
// then try it again, and go back to it once it answers.
func TestRedisFailurePausesIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(t *testing.T, rdb *redis.Client, clock *fakeClock) func(key string)
	}{
		{"dedupe", func(t *testing.T, rdb *redis.Client, clock *fakeClock) func(string) {
			d := bot.NewDeduper(rdb, "p:", time.Hour, clock.Now, zaptest.NewLogger(t))
			return func(key string) { require.True(t, d.First(t.Context(), key)) }
		}},
		{"rate limit", func(t *testing.T, rdb *redis.Client, clock *fakeClock) func(string) {
			l := bot.NewLimiter(rdb, "p:", time.Minute, clock.Now, zaptest.NewLogger(t))
			return func(key string) { require.True(t, l.Allow(t.Context(), key, 10).Allowed) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &flakyRedis{}
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
			rdb.AddHook(h)
			t.Cleanup(func() { _ = rdb.Close() })
			clock := &fakeClock{now: time.Unix(600, 0)}
			call := tc.call(t, rdb, clock)

			call("a")
			require.Equal(t, 1, h.set(true), "up: Redis is asked")
			call("b")
			call("c")
			call("d")
			require.Equal(t, 1, h.set(true), "one failure, then no calls during the cool-down")
			clock.Advance(1500 * time.Millisecond)
			call("e")
			require.Equal(t, 0, h.set(true), "still cooling down")

			// The pause is over: one call probes (held here), the others meanwhile go without Redis.
			clock.Advance(500 * time.Millisecond)
			h.mu.Lock()
			h.gate, h.entered = make(chan struct{}), make(chan struct{})
			gate, entered := h.gate, h.entered
			h.mu.Unlock()
			probed := make(chan struct{})
			go func() { defer close(probed); call("p") }()
			<-entered
			call("q")
			call("r")
			close(gate)
			<-probed
			require.Equal(t, 1, h.set(false), "one probe, not one per caller; it failed: paused again")

			clock.Advance(2 * time.Second)
			call("f")
			call("g")
			require.Equal(t, 2, h.set(false), "after the cool-down Redis is tried, and used again")
		})
	}
}

// keyRedis is a Redis of SET NX and DEL only, kept in a map, that fails every command while down.
type keyRedis struct {
	mu   sync.Mutex
	down bool
	keys map[string]bool
}

func (h *keyRedis) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *keyRedis) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.down {
			return errRedisHung
		}
		key := fmt.Sprint(cmd.Args()[1])
		switch c := cmd.(type) {
		case *redis.BoolCmd: // SET NX
			c.SetVal(!h.keys[key])
			h.keys[key] = true
		case *redis.IntCmd: // DEL
			delete(h.keys, key)
			c.SetVal(1)
		}
		return nil
	}
}

func (h *keyRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *keyRedis) setDown(down bool) { h.mu.Lock(); h.down = down; h.mu.Unlock() }

// TestDedupeForgetDuringRedisPause: an event marked in Redis and then not taken is forgotten in
// Redis even while the dedupe's Redis calls are paused after a failure (a flap): otherwise the mark
// outlives the pause, and the platform's redelivery, here or on another replica, is dropped as a
// duplicate once Redis is used again: acknowledged, never answered.
func TestDedupeForgetDuringRedisPause(t *testing.T) {
	h := &keyRedis{keys: map[string]bool{}}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	rdb.AddHook(h)
	t.Cleanup(func() { _ = rdb.Close() })
	clock := &fakeClock{now: time.Unix(600, 0)}
	d := bot.NewDeduper(rdb, "p:", time.Hour, clock.Now, zaptest.NewLogger(t))
	other := bot.NewDeduper(rdb, "p:", time.Hour, clock.Now, zaptest.NewLogger(t)) // another replica

	require.True(t, d.First(t.Context(), "ev1"), "marked in Redis")
	h.setDown(true)
	require.True(t, d.First(t.Context(), "ev2"), "Redis fails: in process only, and paused")
	h.setDown(false)
	d.Forget(t.Context(), "ev1") // ev1 was not taken: the platform delivers it again
	clock.Advance(10 * time.Second)
	require.True(t, other.First(t.Context(), "ev1"), "the redelivery on another replica is taken")
}
