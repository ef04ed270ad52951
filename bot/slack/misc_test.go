package slack

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

func TestTTLCache(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	c := newTTLCache(3, time.Minute, clock.Now)
	require.True(t, c.add("a"))
	require.False(t, c.add("a"), "seen")
	clock.Advance(59 * time.Second)
	require.False(t, c.add("a"), "still within the TTL")
	clock.Advance(time.Second)
	require.True(t, c.add("a"), "expired after the TTL")
	for _, k := range []string{"b", "c", "d"} {
		require.True(t, c.add(k))
	}
	require.True(t, c.add("a"), "the oldest entry was evicted at the size bound")
	c.set("n", "ada")
	v, ok := c.get("n")
	require.True(t, ok)
	require.Equal(t, "ada", v)
	c.remove("n")
	_, ok = c.get("n")
	require.False(t, ok)
}

// TestRedisDownFallsBack: a Redis that does not answer must not stop the bot: dedupe and limits
// carry on in process (and the store still dedupes turns).
func TestRedisDownFallsBack(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	log := zaptest.NewLogger(t)
	clock := &fakeClock{now: time.Unix(600, 0)}
	d := newDeduper(rdb, "p:", time.Hour, clock.Now, log)
	require.True(t, d.first(t.Context(), "ev:1"))
	require.False(t, d.first(t.Context(), "ev:1"))
	l := newLimiter(rdb, "p:", time.Minute, clock.Now, log)
	require.True(t, l.allow(t.Context(), "u:1", 1).allowed)
	v := l.allow(t.Context(), "u:1", 1)
	require.False(t, v.allowed)
	require.True(t, v.notify)
	require.Equal(t, time.Minute, v.resetIn)
	require.False(t, l.allow(t.Context(), "u:1", 1).notify, "only the first refusal is announced")
	require.True(t, l.allow(t.Context(), "u:1", -1).allowed, "a negative limit is off")
}

func TestRedisDedupeAndForget(t *testing.T) {
	rdb := testRedis(t)
	prefix := randomPrefix(t)
	log := zaptest.NewLogger(t)
	a := newDeduper(rdb, prefix, time.Minute, time.Now, log)
	b := newDeduper(rdb, prefix, time.Minute, time.Now, log)
	require.True(t, a.first(t.Context(), "ev:1"))
	require.False(t, b.first(t.Context(), "ev:1"), "another replica sees the mark")
	ttl, err := rdb.TTL(t.Context(), prefix+"seen:ev:1").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second, "marks expire (SET NX EX)")
	a.forget(t.Context(), "ev:1")
	require.True(t, b.first(t.Context(), "ev:1"), "a withdrawn mark lets the redelivery in")
}

func TestTasksCloseAndWait(t *testing.T) {
	q := newTasks()
	gate := make(chan struct{})
	var ran sync.WaitGroup
	ran.Add(2)
	for range 2 {
		require.True(t, q.add(func() { <-gate; ran.Done() }))
	}
	q.close()
	require.False(t, q.add(func() {}), "closed")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, q.wait(ctx), context.Canceled, "work still runs")
	close(gate)
	require.NoError(t, q.wait(t.Context()))
	ran.Wait()
}

func TestSpell(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1 minute", 5 * time.Minute: "5 minutes", 42 * time.Second: "42 seconds",
		time.Hour: "1 hour", 90 * time.Second: "90 seconds", 1500 * time.Millisecond: "1.5s",
	} {
		require.Equal(t, want, spell(d))
	}
}
