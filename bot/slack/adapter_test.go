package slack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/threadbox/threadbox/db/dbtest"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

func randomPrefix(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "tbtest:" + t.Name() + ":" + hex.EncodeToString(b[:]) + ":"
}

func TestDedupeRetriesAndSecondEventIDs(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h)
	ev := hs.fake.Mention("C1", "U1", "echo once")
	hs.deliver(t, ev)
	hs.deliver(t, ev, slackfake.Retry(1, "http_timeout"))
	hs.deliver(t, ev, slackfake.Retry(2, "http_timeout"))
	// The same message under a second event id (app_mention + message.channels, or Slack repeating
	// itself with a fresh id) is the same request too.
	hs.deliver(t, hs.fake.Again(ev, "app_mention"))
	hs.deliver(t, hs.fake.Again(ev, "message"))
	msg := h.next(t)
	require.Equal(t, "slack:T0FAKE:C1:"+ev.TS, msg.EventID, "the store dedupes on the message, not the event id")

	// A later, different mention is handled: it proves the earlier deliveries were all processed (the
	// thread's queue is in order), so "only one" is not a race.
	next := hs.fake.Mention("C1", "U1", "echo twice", slackfake.InThread(ev.TS))
	hs.deliver(t, next)
	require.Equal(t, "echo twice", h.next(t).Text)
	require.Len(t, h.messages(), 2)
}

func TestIgnoresOwnAndBotMessages(t *testing.T) {
	h := newStubHandler()
	h.handleFunc = func(ctx context.Context, msg bot.Message, r bot.Replier) error {
		return r.Post(ctx, "answer to "+msg.Text)
	}
	hs := newHarness(t, nil, h, func(o *Options) { o.FollowUps = true; o.Sessions = sessions{has: true} })
	root := hs.fake.Mention("C1", "U1", "first")
	hs.deliver(t, root)
	h.next(t)
	// The first event makes the adapter learn its own user id off the ack path; wait for that, so
	// the bot's message below without bot_id is known by its user id (what this test checks).
	require.NoError(t, hs.ad.Check(t.Context()))
	waitFake(t, hs.fake, "the answer", func() bool { return len(hs.fake.BotMessages("C1")) == 1 })
	answer := hs.fake.BotMessages("C1")[0]
	hs.deliver(t, hs.fake.BotEcho(answer))
	// The bot's own message without bot_id still carries its user id.
	hs.deliver(t, hs.fake.Callback(map[string]any{"type": "message", "user": "U0BOT", "text": "x", "ts": answer.TS,
		"thread_ts": root.TS, "channel": "C1", "channel_type": "channel"}))
	hs.deliver(t, hs.fake.Callback(map[string]any{"type": "app_mention", "user": "U5", "bot_id": "B5", "text": "<@U0BOT> loop",
		"ts": "9.1", "channel": "C1"}))
	marker := hs.fake.ChannelMessage("C1", "U1", "a follow-up", slackfake.InThread(root.TS))
	hs.deliver(t, marker)
	require.Equal(t, "a follow-up", h.next(t).Text)
	require.Len(t, h.messages(), 2)
}

// sessions is a bot.Sessions with a fixed answer for every thread.
type sessions struct {
	has bool
	err error
}

var _ bot.Sessions = sessions{}

func (s sessions) HasSession(context.Context, bot.ThreadKey) (bool, error) { return s.has, s.err }

// flakySessions has a session for every thread, and fails while err is set.
type flakySessions struct{ err atomic.Bool }

func (s *flakySessions) HasSession(context.Context, bot.ThreadKey) (bool, error) {
	if s.err.Load() {
		return false, errors.New("database down")
	}
	return true, nil
}

func TestFollowUps(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		h := newStubHandler()
		hs := newHarness(t, nil, h, func(o *Options) { o.Sessions = sessions{has: true} })
		root := hs.fake.Mention("C1", "U1", "start")
		hs.deliver(t, root)
		h.next(t)
		hs.deliver(t, hs.fake.ChannelMessage("C1", "U1", "no mention", slackfake.InThread(root.TS)))
		hs.deliver(t, hs.fake.Mention("C1", "U1", "marker", slackfake.InThread(root.TS)))
		require.Equal(t, "marker", h.next(t).Text)
	})
	t.Run("only in threads with a session", func(t *testing.T) {
		h := newStubHandler()
		hs := newHarness(t, nil, h, func(o *Options) { o.FollowUps = true; o.Sessions = sessions{} })
		root := hs.fake.ChannelMessage("C1", "U1", "chatter")
		hs.deliver(t, hs.fake.ChannelMessage("C1", "U2", "reply", slackfake.InThread(root.TS)))
		hs.deliver(t, hs.fake.Mention("C1", "U1", "marker", slackfake.InThread(root.TS)))
		require.Equal(t, "marker", h.next(t).Text)
	})
	t.Run("on", func(t *testing.T) {
		h := newStubHandler()
		hs := newHarness(t, nil, h, func(o *Options) { o.FollowUps = true; o.Sessions = sessions{has: true} })
		root := hs.fake.Mention("C1", "U1", "start")
		hs.deliver(t, root)
		h.next(t)
		hs.deliver(t, hs.fake.ChannelMessage("C1", "U2", "ls &amp; pwd", slackfake.InThread(root.TS), slackfake.RawText()))
		m := h.next(t)
		require.Equal(t, "ls & pwd", m.Text)
		require.Equal(t, "slack:T0FAKE:C1:"+root.TS, m.Thread.String())
		require.Equal(t, "U2", m.User.ID)
	})
	t.Run("a failed lookup is not acknowledged", func(t *testing.T) {
		// Acknowledged, the follow-up would be gone: Slack does not redeliver it, and the thread's
		// session never sees it. Unacknowledged, Slack redelivers it once the database is back.
		h := newStubHandler()
		s := &flakySessions{}
		s.err.Store(true)
		hs := newHarness(t, nil, h, func(o *Options) { o.FollowUps = true; o.Sessions = s })
		root := hs.fake.Mention("C1", "U1", "start")
		hs.deliver(t, root)
		h.next(t)
		ev := hs.fake.ChannelMessage("C1", "U2", "no mention", slackfake.InThread(root.TS))
		res, err := hs.fake.Deliver(t.Context(), hs.events, ev)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, res.Status, "not known to be ignorable: not acknowledged")
		s.err.Store(false)
		hs.deliver(t, ev, slackfake.Retry(1, "http_error"))
		require.Equal(t, "no mention", h.next(t).Text, "the redelivery is taken")
	})
	t.Run("needs Sessions", func(t *testing.T) {
		_, err := New(Options{BotToken: "x", Handler: newStubHandler(), FollowUps: true})
		require.ErrorContains(t, err, "Sessions")
	})
}

func TestDMs(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h)
	hs.fake.AddUser("U7", "ada")
	a := hs.fake.DM("U7", "echo a > b")
	hs.deliver(t, a)
	m := h.next(t)
	require.Equal(t, bot.SlackDM("T0FAKE", "U7"), m.Thread)
	require.Equal(t, "echo a > b", m.Text, "Slack's escaping is undone")
	require.Equal(t, "U7", m.User.ID)
	require.Equal(t, slackfake.DMChannel("U7"), m.ChannelID)
	hs.drain(t) // users.info runs off the ack path and fills the name cache
	hs.deliver(t, hs.fake.DM("U7", "<@U0BOT> second", slackfake.RawText()))
	m2 := h.next(t)
	require.Equal(t, bot.User{ID: "U7", Name: "ada", Team: "T0FAKE"}, m2.User, "the name, once known, comes with the message")
	require.Equal(t, m.Thread, m2.Thread, "two DMs from one user share a thread key (and so a sandbox)")
	require.Equal(t, "second", m2.Text, "a mention in a DM is stripped too")
}

func TestInboundFiles(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h, func(o *Options) { o.MaxInboundFileBytes = 1024 })
	small := hs.fake.AddUserFile("U1", "data.csv", []byte("a,b\n1,2\n"))
	big := hs.fake.AddUserFile("U1", "big.bin", make([]byte, 4096))
	ev := hs.fake.Mention("C1", "U1", "wc -l input/data.csv", slackfake.WithFiles(small, big))
	hs.deliver(t, ev)
	m := h.next(t)
	require.Len(t, m.Files, 1)
	require.Equal(t, "data.csv", m.Files[0].Name)
	require.Equal(t, []byte("a,b\n1,2\n"), readFile(t, m.Files[0]))
	require.Len(t, m.Notes, 1, "the skipped file is noted for the reply")
	require.Contains(t, m.Notes[0], "big.bin")
	require.Contains(t, m.Notes[0], "limit")
	for _, c := range hs.fake.Calls() {
		require.NotContains(t, c.Method, "files.info")
	}
}

func TestInboundFileDownloadFailureIsReported(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h)
	f := hs.fake.AddUserFile("U1", "x.txt", []byte("x"))
	f.URLPrivateDownload = strings.Replace(f.URLPrivateDownload, "T0FAKE-", "T0FAKE-nope", 1)
	f.URLPrivate = f.URLPrivateDownload
	ev := hs.fake.Mention("C1", "U1", "cat input/x.txt", slackfake.WithFiles(f))
	hs.deliver(t, ev)
	m := h.next(t)
	require.Len(t, m.Files, 1)
	_, err := m.Files[0].Open(t.Context())
	require.ErrorContains(t, err, "download failed", "the turn reports the failed download")
}

func TestRateLimitInProcess(t *testing.T) {
	clock := &fakeClock{now: windowStart()}
	h := newStubHandler()
	hs := newHarness(t, nil, h, func(o *Options) {
		o.Now = clock.Now
		o.RateLimit = RateLimit{UserMessages: 3, ChannelMessages: 100, Window: time.Minute}
	})
	root := hs.fake.Mention("C1", "U1", "m0")
	hs.deliver(t, root)
	var sent []slackfake.Event
	for i := 1; i < 6; i++ {
		ev := hs.fake.Mention("C1", "U1", fmt.Sprint("m", i), slackfake.InThread(root.TS))
		hs.deliver(t, ev)
		sent = append(sent, ev)
	}
	hs.deliver(t, hs.fake.Mention("C1", "U1", "stop", slackfake.InThread(root.TS)))
	hs.deliver(t, hs.fake.Mention("C1", "U2", "other user", slackfake.InThread(root.TS)))
	var texts []string
	for range 5 {
		texts = append(texts, h.next(t).Text)
	}
	require.Equal(t, []string{"m0", "m1", "m2", "stop", "other user"}, texts, "3 per user, stop always passes, others unaffected")
	notices := politeNotices(hs.fake, "C1", root.TS)
	require.Len(t, notices, 1, "one polite reply per window, not one per message")
	require.Contains(t, notices[0], "<@U1>")
	// Each refused message carries the skipped mark, so its sender sees which to send again.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, hs.fake.Wait(ctx, func() bool {
		for _, ev := range sent[2:] {
			if !slices.Contains(hs.fake.Reactions(ev.Channel, ev.TS), bot.ReactSkipped) {
				return false
			}
		}
		return true
	}), "m3..m5 are marked skipped")
	for _, ev := range sent[:2] {
		require.NotContains(t, hs.fake.Reactions(ev.Channel, ev.TS), bot.ReactSkipped)
	}

	clock.Advance(time.Minute)
	hs.deliver(t, hs.fake.Mention("C1", "U1", "next window", slackfake.InThread(root.TS)))
	require.Equal(t, "next window", h.next(t).Text)
}

func politeNotices(fake *slackfake.Server, ch, thread string) []string {
	var out []string
	for _, m := range fake.Replies(ch, thread) {
		if strings.Contains(m.Text, "skipping messages") {
			out = append(out, m.Text)
		}
	}
	return out
}

// TestRateLimitSharedInRedis runs two adapters, as two replicas would, on one Redis: the per-user
// limit is one budget across both, and only one of them sends the polite reply.
func TestRateLimitSharedInRedis(t *testing.T) {
	rdb := dbtest.Redis(t)
	clock := &fakeClock{now: windowStart()}
	prefix := randomPrefix(t)
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	h := newStubHandler()
	mod := func(o *Options) {
		o.Redis, o.KeyPrefix, o.Now = rdb, prefix, clock.Now
		o.RateLimit = RateLimit{UserMessages: 4, ChannelMessages: 100, Window: time.Minute}
	}
	a, b := newHarness(t, fake, h, mod), newHarness(t, fake, h, mod)
	root := fake.Mention("C1", "U1", "r0")
	a.deliver(t, root)
	require.Equal(t, "r0", h.next(t).Text)
	for i := 1; i < 8; i++ {
		hs := []*harness{a, b}[i%2]
		hs.deliver(t, fake.Mention("C1", "U1", fmt.Sprint("r", i), slackfake.InThread(root.TS)))
	}
	waitFake(t, fake, "the polite reply", func() bool { return len(politeNotices(fake, "C1", root.TS)) == 1 })
	// Replicas deliver in parallel, so only the count is certain: 4 handled in all.
	marker := fake.Mention("C1", "U2", "marker", slackfake.InThread(root.TS))
	a.deliver(t, marker)
	b.deliver(t, marker, slackfake.Retry(1, "http_timeout"))
	a.drain(t)
	b.drain(t)
	handled := 0
	for _, m := range h.messages() {
		if m.User.ID == "U1" {
			handled++
		}
	}
	require.Equal(t, 4, handled, "one shared budget of 4 across both replicas")
	require.Len(t, politeNotices(fake, "C1", root.TS), 1)
	// The marker went to both replicas (a Slack retry landing elsewhere): Redis dedupe let one through.
	n := 0
	for _, m := range h.messages() {
		if m.Text == "marker" {
			n++
		}
	}
	require.Equal(t, 1, n)
}

func TestReplier(t *testing.T) {
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	hs := newHarness(t, fake, newStubHandler(), func(o *Options) { o.MaxFileBytes = 10 })
	root := fake.Mention("C1", "U1", "go")
	r := hs.ad.newReplier("C1", root.TS, root.TS)
	ctx := t.Context()

	require.NoError(t, r.React(ctx, bot.ReactSeen))
	require.NoError(t, r.React(ctx, bot.ReactSeen), "already_reacted is fine")
	require.NoError(t, r.Progress(ctx, "working…"))
	require.NoError(t, r.Progress(ctx, "working… 1"))
	fake.RateLimit("chat.update", 1, 7*time.Second)
	err := r.Progress(ctx, "working… 2")
	var rl *bot.RateLimitedError
	require.ErrorAs(t, err, &rl, "a 429 reaches the coalescer as a RateLimitedError")
	require.Equal(t, 7*time.Second, rl.RetryAfter)
	fake.Fail("chat.update", 1, "ratelimited")
	require.ErrorAs(t, r.Progress(ctx, "working… 3"), &rl, "so does ok:false ratelimited")
	require.NoError(t, r.Progress(ctx, "done"))

	require.NoError(t, r.Post(ctx, "<!channel> a & b"))
	fake.RateLimit("chat.postMessage", 1, time.Second)
	require.NoError(t, r.Post(ctx, "after a 429"), "Post waits out Retry-After")

	id, err := r.Upload(ctx, "a.txt", []byte("hello"))
	require.NoError(t, err)
	_, err = r.Upload(ctx, "big.txt", []byte("01234567890"))
	require.ErrorContains(t, err, "over Slack's upload limit")
	_, err = r.Upload(ctx, "empty.txt", nil)
	require.Error(t, err)
	require.NoError(t, r.React(ctx, bot.ReactDone))

	replies := fake.Replies("C1", root.TS)
	require.Len(t, replies, 3)
	require.Equal(t, "done", replies[0].Text, "one progress message, edited")
	require.Equal(t, []string{"working…", "working… 1"}, replies[0].Edits)
	require.Equal(t, "&lt;!channel&gt; a &amp; b", replies[1].Text, "agent text cannot ping the channel")
	require.Equal(t, "after a 429", replies[2].Text)
	files := fake.Files("C1")
	require.Len(t, files, 1)
	require.Equal(t, id, files[0].ID)
	require.Equal(t, []byte("hello"), files[0].Data)
	require.Equal(t, root.TS, files[0].ThreadTS, "shared into the thread")
	require.Equal(t, []string{"white_check_mark"}, fake.Reactions("C1", root.TS), "✅ replaces 👀")
	methods := map[string]int{}
	for _, c := range fake.Calls() {
		methods[c.Method]++
		require.Equal(t, fake.Options().BotToken, c.Token)
	}
	require.Equal(t, 1, methods["files.getUploadURLExternal"])
	require.Equal(t, 1, methods["files.completeUploadExternal"])
	require.Zero(t, methods["files.upload"], "the retired method is never called")
	require.Equal(t, bot.Limits{MaxMessage: 3500, MaxChunks: 4, MaxFileBytes: 10}, r.Limits())
}

func TestBadTokenIsReported(t *testing.T) {
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	ad, err := New(Options{BotToken: "xoxb-wrong", APIURL: fake.APIURL(), Handler: newStubHandler()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ad.Close() })
	err = ad.Check(t.Context())
	require.ErrorContains(t, err, "invalid_auth")
	require.ErrorContains(t, err, "slack.bot_token")
}

// TestAPIURLForms: slack.api_url may be given with or without its trailing slash (a proxy's base
// URL is usually written without one), and file links on that host get the token.
func TestAPIURLForms(t *testing.T) {
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	for _, u := range []string{fake.URL() + "/api", fake.URL() + "/api/"} {
		h := newStubHandler()
		hs := newHarness(t, fake, h, func(o *Options) { o.APIURL = u })
		require.NoError(t, hs.ad.Check(t.Context()), u)
		f := fake.AddUserFile("U1", "a.txt", []byte("A"))
		hs.deliver(t, fake.Mention("C1", "U1", "cat input/a.txt", slackfake.WithFiles(f)))
		fs := h.next(t).Files
		require.Len(t, fs, 1, u)
		require.Equal(t, []byte("A"), readFile(t, fs[0]), u)
	}
}

// TestAckOnlyWhatWasTaken: an event is acknowledged only once the bot has taken it. One the bot
// could not record gets 503 (Slack redelivers it), and its redelivery is taken; after Close every
// event gets 503, so Slack redelivers to another replica.
func TestAckOnlyWhatWasTaken(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	h := newStubHandler()
	h.handleFunc = func(ctx context.Context, msg bot.Message, r bot.Replier) error {
		if refuse.Load() {
			return fmt.Errorf("%w: database down", bot.ErrNotAccepted)
		}
		return nil
	}
	hs := newHarness(t, nil, h)
	ev := hs.fake.Mention("C1", "U1", "hello")
	res, err := hs.fake.Deliver(t.Context(), hs.events, ev)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, res.Status, "not taken: not acknowledged")
	h.next(t) // the refused attempt
	refuse.Store(false)
	hs.deliver(t, ev, slackfake.Retry(1, "http_error"))
	require.Equal(t, "hello", h.next(t).Text, "the redelivery is taken: the dedupe mark was withdrawn")

	require.NoError(t, hs.ad.Close())
	res, err = hs.fake.Deliver(t.Context(), hs.events, hs.fake.Mention("C1", "U1", "late"))
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, res.Status, "after Close, Slack is told to redeliver elsewhere")
	_, err = hs.fake.SlashCommand(t.Context(), hs.commands, slackfake.SlashCommand{Text: "sessions", UserID: "U1"})
	require.NoError(t, err)
}

// TestEditedMentionIsNoNewRequest: Slack sends app_mention again, with an "edited" field and the
// message's own ts, when a user edits a message that mentions the bot. The (channel, ts) dedupe mark
// hides it for DedupeTTL on the replica that saw the original, but not after a restart or the TTL,
// and commands (reset, stop, admin) have no turn row to stop them running again.
func TestEditedMentionIsNoNewRequest(t *testing.T) {
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	first := newStubHandler()
	hs := newHarness(t, fake, first)
	orig := fake.Mention("C1", "U1", "reset")
	hs.deliver(t, orig)
	require.Equal(t, "reset", first.next(t).Text)

	// The replica restarts (in-process marks gone); then the user fixes a typo in the message.
	h := newStubHandler()
	hs = newHarness(t, fake, h)
	hs.deliver(t, fake.Callback(map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> reset!",
		"ts": orig.TS, "channel": "C1", "edited": map[string]any{"user": "U1", "ts": "9999999999.000000"}}))
	hs.deliver(t, fake.Mention("C1", "U1", "marker"))
	require.Equal(t, "marker", h.next(t).Text, "the edit is not a new request")
}
