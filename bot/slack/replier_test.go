package slack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// TestReplierMarksWaitOutRateLimits: Slack allows few reactions a minute. A mark that says how a
// message ended waits out a 429 (and ok:false ratelimited), so the message does not stay under 👀 as
// if unanswered; 👀 is tried once.
func TestReplierMarksWaitOutRateLimits(t *testing.T) {
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	hs := newHarness(t, fake, newStubHandler())
	ctx := t.Context()
	calls := func(method string) int { return len(fake.Calls(method)) }

	root := fake.Mention("C1", "U1", "go")
	r := hs.ad.newReplier("C1", root.TS, root.TS)
	fake.RateLimit("reactions.add", 1, time.Second)
	require.Error(t, r.React(ctx, bot.ReactSeen), "👀 is tried once")
	require.Equal(t, 1, calls("reactions.add"))
	require.NoError(t, r.React(ctx, bot.ReactSeen))

	fake.RateLimit("reactions.add", 1, time.Second)
	fake.Fail("reactions.remove", 1, "ratelimited")
	require.NoError(t, r.React(ctx, bot.ReactDone))
	require.Equal(t, []string{bot.ReactDone}, fake.Reactions("C1", root.TS), "✅ in place of 👀, each call waited out")
	require.Equal(t, 4, calls("reactions.add"), "👀 twice, ✅ twice")
	require.Equal(t, 2, calls("reactions.remove"))

	other := fake.Mention("C1", "U1", "too fast")
	fake.RateLimit("reactions.add", 1, time.Second)
	require.NoError(t, hs.ad.newReplier("C1", other.TS, other.TS).React(ctx, bot.ReactSkipped))
	require.Equal(t, []string{bot.ReactSkipped}, fake.Reactions("C1", other.TS), "🚫 says how a message ended too")
}

// TestProgressAfterItsMessageWasDeleted: someone deletes the "working…" message mid-turn. Every
// later edit fails with message_not_found; the progress comes back as a new message instead of being
// lost for the rest of the turn (the final "done in …" included).
func TestProgressAfterItsMessageWasDeleted(t *testing.T) {
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	hs := newHarness(t, fake, newStubHandler())
	ctx := t.Context()
	root := fake.Mention("C1", "U1", "go")
	r := hs.ad.newReplier("C1", root.TS, root.TS)

	require.NoError(t, r.Progress(ctx, "working…"))
	fake.Fail("chat.update", 1, "message_not_found")
	require.NoError(t, r.Progress(ctx, "working… 1"))
	replies := fake.Replies("C1", root.TS)
	require.Len(t, replies, 2)
	require.Equal(t, "working… 1", replies[1].Text, "a new progress message")
	require.NoError(t, r.Progress(ctx, "done"))
	require.Equal(t, "done", fake.Replies("C1", root.TS)[1].Text)
	require.Len(t, fake.Replies("C1", root.TS), 2, "and it is the one edited after")
}
