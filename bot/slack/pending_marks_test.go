package slack

import (
	"context"
	"net/http"
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

// gateHandler takes messages one at a time: it reports each, then answers with what the test sends.
type gateHandler struct {
	got    chan bot.Message
	answer chan error
}

func (g gateHandler) Handle(_ context.Context, msg bot.Message, _ bot.Replier) error {
	g.got <- msg
	return <-g.answer
}

// TestRetryWhileFirstDeliveryPending: Slack retries an event whose first delivery is still being
// taken (its ack is late). That retry must not be acknowledged as a duplicate: the first delivery
// may yet fail (not taken), and then nobody answers a message Slack was told was received. It is
// answered "redeliver"; once the first delivery has failed, the next retry is taken.
func TestRetryWhileFirstDeliveryPending(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis bool
	}{{"redis", true}, {"in process", false}} {
		t.Run(tc.name, func(t *testing.T) {
			fake := slackfake.New(slackfake.Options{})
			t.Cleanup(fake.Close)
			g := gateHandler{got: make(chan bot.Message, 1), answer: make(chan error, 1)}
			h := newHarness(t, fake, g, func(o *Options) {
				if tc.redis {
					o.Redis, o.KeyPrefix = dbtest.Redis(t), randomPrefix(t)
				}
			})
			// Runs before the harness's cleanup: a handler left waiting would hold its server.
			t.Cleanup(func() { close(g.answer) })
			ev := fake.Mention("C1", "U1", "hello")
			first := make(chan slackfake.Result, 1)
			go func() {
				res, err := fake.Deliver(context.WithoutCancel(t.Context()), h.events, ev)
				if err != nil {
					res.Status = -1
				}
				first <- res
			}()
			<-g.got // the first delivery is being taken
			retry, err := fake.Deliver(t.Context(), h.events, ev)
			require.NoError(t, err)
			require.NotEqual(t, http.StatusOK, retry.Status, "a retry of an event still being taken is not acknowledged")
			g.answer <- bot.ErrNotAccepted // the first delivery fails after all
			require.Equal(t, http.StatusServiceUnavailable, (<-first).Status)
			g.answer <- nil
			h.deliver(t, ev) // Slack's next retry is taken
			require.Equal(t, "hello", (<-g.got).Text)
			h.drain(t)
		})
	}
}
