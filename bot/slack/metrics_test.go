package slack

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// countingMetrics counts ChatEvent kinds and uploads.
type countingMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

var _ bot.ChatMetrics = (*countingMetrics)(nil)

func (c *countingMetrics) ChatEvent(platform, kind string) {
	c.mu.Lock()
	c.n[platform+" "+kind]++
	c.mu.Unlock()
}

func (c *countingMetrics) Upload(platform, outcome string) {
	c.mu.Lock()
	c.n[platform+" upload "+outcome]++
	c.mu.Unlock()
}

func (c *countingMetrics) get(k string) int { c.mu.Lock(); defer c.mu.Unlock(); return c.n[k] }

// TestEventsAreCountedByWhatHappened: received, deduped, acknowledged, refused for a bad signature and
// for the rate limit, as /metrics reports them. Every count is final when Deliver returns: the adapter
// counts before it answers.
func TestEventsAreCountedByWhatHappened(t *testing.T) {
	met := &countingMetrics{n: map[string]int{}}
	h := newStubHandler()
	hs := newHarness(t, nil, h, func(o *Options) {
		o.Metrics = met
		o.Now = (&fakeClock{now: windowStart()}).Now
		o.RateLimit = RateLimit{UserMessages: 2, ChannelMessages: 100, Window: time.Minute}
	})
	root := hs.fake.Mention("C1", "U1", "one")
	hs.deliver(t, root)
	// Slack retries seconds later; the first delivery's dedupe marks are confirmed just after its
	// ack, off the ack path. A retry before that is asked for again (503), which a loaded machine
	// showed: this test is about counting, so the retry comes once the marks are confirmed.
	hs.drain(t)
	hs.deliver(t, root) // a retry of the same event
	hs.deliver(t, hs.fake.Mention("C1", "U1", "two", slackfake.InThread(root.TS)))
	hs.deliver(t, hs.fake.Mention("C1", "U1", "three: over the limit", slackfake.InThread(root.TS)))
	res, err := hs.fake.Deliver(t.Context(), hs.events, hs.fake.Mention("C1", "U1", "forged"), slackfake.SignWith("wrong"))
	require.NoError(t, err)
	require.Equal(t, 401, res.Status)

	for _, tc := range []struct {
		kind string
		want int
	}{
		{bot.ChatReceived, 4},
		{bot.ChatDeduped, 1},
		{bot.ChatAck, 4},
		{bot.ChatRefusedRateLimit, 1},
		{bot.ChatRefusedSignature, 1},
	} {
		require.Equal(t, tc.want, met.get("slack "+tc.kind), tc.kind)
	}
}
