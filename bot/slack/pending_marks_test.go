package slack

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
)

// ttlProbe is a handler that reads, while it takes a message, how long its dedupe marks in Redis
// have left: what a crash at that moment would leave behind.
type ttlProbe struct {
	rdb    *redis.Client
	keys   func(bot.Message) []string
	during chan []time.Duration
}

func (p ttlProbe) Handle(ctx context.Context, msg bot.Message, _ bot.Replier) error {
	var ttls []time.Duration
	for _, k := range p.keys(msg) {
		d, err := p.rdb.TTL(ctx, k).Result()
		if err != nil {
			return err
		}
		ttls = append(ttls, d)
	}
	p.during <- ttls
	return nil
}

// TestDedupeMarksPendingUntilTaken: while an event is being taken, its Redis marks last only
// bot.PendingTTL, so a process that dies then does not leave marks that drop Slack's later retries
// of an event nobody took; once taken, they last the dedupe TTL.
func TestDedupeMarksPendingUntilTaken(t *testing.T) {
	rdb := dbtest.Redis(t)
	prefix := randomPrefix(t)
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	ev := fake.Mention("C1", "U1", "hello")
	keys := []string{prefix + "seen:ev:" + ev.ID, prefix + "seen:msg:slack:" + fake.Options().TeamID + ":C1:" + ev.TS}
	probe := ttlProbe{rdb: rdb, keys: func(bot.Message) []string { return keys }, during: make(chan []time.Duration, 1)}
	h := newHarness(t, fake, probe, func(o *Options) { o.Redis, o.KeyPrefix = rdb, prefix })
	h.deliver(t, ev)
	during := <-probe.during
	for i, d := range during {
		require.Positive(t, d, "mark %s is set", keys[i])
		require.LessOrEqual(t, d, bot.PendingTTL, "mark %s is pending while the event is taken", keys[i])
	}
	h.drain(t)
	for _, k := range keys {
		d, err := rdb.TTL(t.Context(), k).Result()
		require.NoError(t, err)
		require.Greater(t, d, bot.PendingTTL, "mark %s lasts the dedupe TTL once the event is taken", k)
	}
}
