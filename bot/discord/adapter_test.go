package discord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/discord"
	"github.com/threadbox/threadbox/bot/discord/discordfake"
)

const waitTimeout = 20 * time.Second

// recorder is a bot.Handler that records messages and, unless refusing, answers each with answer.
type recorder struct {
	mu     sync.Mutex
	msgs   []bot.Message
	refuse bool
	answer func(m bot.Message) string
	// seen is signalled once per message handled.
	seen chan bot.Message
}

func (h *recorder) Handle(ctx context.Context, m bot.Message, r bot.Replier) error {
	h.mu.Lock()
	refuse := h.refuse
	if !refuse {
		h.msgs = append(h.msgs, m)
	}
	h.mu.Unlock()
	h.seen <- m
	if refuse {
		return fmt.Errorf("%w: the database is down", bot.ErrNotAccepted)
	}
	if h.answer != nil {
		go func() {
			ctx := context.WithoutCancel(ctx)
			_ = r.React(ctx, bot.ReactSeen)
			_ = r.Post(ctx, h.answer(m))
			_ = r.React(ctx, bot.ReactDone)
		}()
	}
	return nil
}

type rig struct {
	fake *discordfake.Server
	ad   *discord.Adapter
	h    *recorder
	http *httptest.Server
}

func newRig(t *testing.T, mod func(*discord.Options)) *rig {
	t.Helper()
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	h := &recorder{seen: make(chan bot.Message, 64), answer: func(m bot.Message) string { return "re: " + m.Text }}
	o := discord.Options{
		BotToken: fake.Options().BotToken, ApplicationID: fake.Options().AppID, PublicKey: fake.PublicKey(),
		APIURL: fake.APIURL(), Handler: h, Logger: zaptest.NewLogger(t),
	}
	if mod != nil {
		mod(&o)
	}
	if rh, ok := o.Handler.(*recorder); ok {
		h = rh
	}
	ad, err := discord.New(o)
	require.NoError(t, err)
	require.NoError(t, ad.Start(t.Context()))
	t.Cleanup(func() { _ = ad.Close() })
	srv := httptest.NewServer(ad.InteractionsHandler())
	t.Cleanup(srv.Close)
	return &rig{fake: fake, ad: ad, h: h, http: srv}
}

func (r *rig) next(t *testing.T) bot.Message {
	t.Helper()
	select {
	case m := <-r.h.seen:
		return m
	case <-time.After(waitTimeout):
		t.Fatal("no message handled")
		return bot.Message{}
	}
}

func (r *rig) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, r.fake.Wait(ctx, cond), what)
}

func (r *rig) said(channel string) string {
	return strings.Join(contents(r.fake.BotMessages(channel)), "\n")
}

func contents(ms []discordfake.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Content)
	}
	return out
}

func TestStartRegistersCommandsAndIdentifies(t *testing.T) {
	r := newRig(t, func(o *discord.Options) { o.GuildIDs = []string{"G1", "G2"} })
	for _, g := range []string{"G1", "G2"} {
		require.Len(t, r.fake.Commands(g), 7, "ask, status, stop, reset, use, runtime, threadbox in %s", g)
	}
	require.Empty(t, r.fake.Commands(""), "per guild, not global")
	require.Equal(t, int(discord.Intents), r.fake.Gateway().Intents)
	var gw bool
	for _, q := range r.fake.Requests() {
		gw = gw || q.Path == "/gateway/bot"
	}
	require.True(t, gw, "the gateway URL comes from GET {api_url}/gateway/bot")
}

func TestMentionStartsAThreadAndAnswersInIt(t *testing.T) {
	r := newRig(t, nil)
	m := r.fake.Mention("G1", "C1", discordfake.Person("U1"), "build it", discordfake.WithAttachment("in.txt", []byte("input")))
	got := r.next(t)
	require.Equal(t, "discord:G1:"+m.ID, got.Thread.String(), "the thread's id is the message's")
	require.Equal(t, "build it", got.Text, "the mention is stripped")
	require.Len(t, got.Files, 1)
	rc, err := got.Files[0].Open(t.Context())
	require.NoError(t, err)
	buf := make([]byte, 16)
	n, _ := rc.Read(buf)
	require.NoError(t, rc.Close())
	require.Equal(t, "input", string(buf[:n]), "attachments download from the api_url host")
	r.wait(t, "the answer in the thread", func() bool { return len(r.fake.BotMessages(m.ID)) == 1 })
	require.Equal(t, []string{"re: build it"}, contents(r.fake.BotMessages(m.ID)))
	th, ok := r.fake.Channel(m.ID)
	require.True(t, ok)
	require.Equal(t, "C1", th.ParentID)
	require.Equal(t, "build it", th.Name)
	r.wait(t, "✅ replaces 👀", func() bool {
		re := r.fake.Reactions("C1", m.ID)
		return len(re) == 1 && re[0] == "✅"
	})

	// A mention in the thread continues its session; a message without a mention is ignored there.
	r.fake.Say(m.ID, discordfake.Person("U1"), "no mention")
	again := r.fake.MentionIn(m.ID, discordfake.Person("U2"), "more")
	got = r.next(t)
	require.Equal(t, "discord:G1:"+m.ID, got.Thread.String())
	require.Equal(t, "discord:"+again.ID, got.EventID)
}

func TestDMsShareOneSessionPerUser(t *testing.T) {
	r := newRig(t, nil)
	first := r.fake.DM(discordfake.Person("U7"), "one")
	require.Equal(t, "discord:dm:U7", r.next(t).Thread.String())
	r.fake.DM(discordfake.Person("U7"), "two")
	require.Equal(t, "discord:dm:U7", r.next(t).Thread.String())
	r.wait(t, "answers in the DM", func() bool { return len(r.fake.BotMessages(first.ChannelID)) == 2 })
	// The bot's own messages and other bots are ignored.
	r.fake.Say(first.ChannelID, discordfake.User{ID: "B9", Username: "other", Bot: true}, "beep")
	r.fake.DM(discordfake.Person("U7"), "three")
	require.Equal(t, "three", r.next(t).Text)
}

func TestReplayAfterResumeRunsOnce(t *testing.T) {
	r := newRig(t, nil)
	seq := r.fake.Gateway().Seq
	r.fake.DM(discordfake.Person("U1"), "once")
	require.Equal(t, "once", r.next(t).Text)
	r.fake.ReplayOnNextResume(seq)
	r.fake.DropConnections()
	r.wait(t, "resumed", func() bool { return r.fake.Gateway().Resumes == 1 && r.fake.Gateway().Connected })
	r.fake.Reconnect() // op 7: resume again
	r.wait(t, "resumed twice", func() bool { return r.fake.Gateway().Resumes == 2 && r.fake.Gateway().Connected })
	r.fake.DM(discordfake.Person("U1"), "after")
	require.Equal(t, "after", r.next(t).Text, "the replayed message was not handled again")
	require.Equal(t, 1, r.fake.Gateway().Identifies)
}

func TestSlashAskIsDeferredThenEditsOriginal(t *testing.T) {
	r := newRig(t, nil)
	r.fake.Mention("G1", "C1", discordfake.Person("U1"), "start")
	r.next(t)
	thread := r.fake.Threads("C1")
	r.wait(t, "thread", func() bool { thread = r.fake.Threads("C1"); return len(thread) == 1 })
	cases := []struct {
		name string
		send func(in *discordfake.Interaction)
	}{
		{"gateway", func(in *discordfake.Interaction) { r.fake.DispatchInteraction(in) }},
		{"http", func(in *discordfake.Interaction) {
			res, err := r.fake.PostInteraction(t.Context(), r.http.URL, in)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.Status)
			require.JSONEq(t, `{"type":5}`, string(res.Body))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := r.fake.Slash(thread[0].ID, discordfake.Person("U1"), "ask", map[string]string{"prompt": "q " + c.name})
			c.send(in)
			got := r.next(t)
			require.Equal(t, "discord:G1:"+thread[0].ID, got.Thread.String())
			r.wait(t, "@original edited", func() bool {
				rec, _ := r.fake.Interaction(in.ID)
				m, ok := r.fake.Message(thread[0].ID, rec.OriginalID)
				return ok && m.Content == "re: q "+c.name
			})
			rec, _ := r.fake.Interaction(in.ID)
			require.Len(t, rec.Callbacks, 1)
			require.Equal(t, 5, rec.Callbacks[0].Type)
			require.Less(t, rec.Callbacks[0].At.Sub(rec.Created), 3*time.Second)
		})
	}
}

func TestSlashAskInAChannelOpensAThread(t *testing.T) {
	r := newRig(t, nil)
	r.fake.GuildChannel("G1", "C1")
	in := r.fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "make a thing"})
	r.fake.DispatchInteraction(in)
	got := r.next(t)
	threads := r.fake.Threads("C1")
	require.Len(t, threads, 1)
	require.Equal(t, "discord:G1:"+threads[0].ID, got.Thread.String())
	require.Equal(t, "make a thing", threads[0].Name)
	r.wait(t, "the link and the answer", func() bool {
		rec, _ := r.fake.Interaction(in.ID)
		m, _ := r.fake.Message("C1", rec.OriginalID)
		return strings.Contains(m.Content, "<#"+threads[0].ID+">") && len(r.fake.BotMessages(threads[0].ID)) == 2
	})
	require.ElementsMatch(t, []string{"re: make a thing", "<@U1> asked: make a thing"}, contents(r.fake.BotMessages(threads[0].ID)))
}

// Threads in an announcement (news) channel are announcement threads (type 10): /ask there starts
// one of those (Discord refuses a public thread in such a channel), and a mention in one continues
// its session like any thread's.
func TestAnnouncementChannelThreads(t *testing.T) {
	r := newRig(t, nil)
	r.fake.NewsChannel("G1", "N1")
	in := r.fake.Slash("N1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "release notes"})
	r.fake.DispatchInteraction(in)
	got := r.next(t)
	threads := r.fake.Threads("N1")
	require.Len(t, threads, 1)
	require.Equal(t, discordfake.ChannelNewsThread, threads[0].Type)
	require.Equal(t, "discord:G1:"+threads[0].ID, got.Thread.String())
	require.Equal(t, "N1", got.ParentChannelID)
	r.wait(t, "the answer in the thread", func() bool { return strings.Contains(r.said(threads[0].ID), "re: release notes") })

	m := r.fake.Mention("G1", "N1", discordfake.Person("U1"), "draft it")
	require.Equal(t, "discord:G1:"+m.ID, r.next(t).Thread.String())
	r.wait(t, "the mention's thread", func() bool { return strings.Contains(r.said(m.ID), "re: draft it") })
	r.fake.MentionIn(m.ID, discordfake.Person("U2"), "more")
	again := r.next(t)
	require.Equal(t, "discord:G1:"+m.ID, again.Thread.String(), "a mention in an announcement thread is in its session")
	require.Equal(t, "N1", again.ParentChannelID)
}

func TestHTTPInteractionsSignatureAndPing(t *testing.T) {
	r := newRig(t, nil)
	res, err := r.fake.Ping(t.Context(), r.http.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status)
	require.JSONEq(t, `{"type":1}`, string(res.Body))
	r.fake.GuildChannel("G1", "C1")
	for _, sg := range []discordfake.Signing{discordfake.BadSignature(), discordfake.Unsigned()} {
		in := r.fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "x"})
		res, err := r.fake.PostInteraction(t.Context(), r.http.URL, in, sg)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, res.Status)
	}
	res, err = r.fake.Ping(t.Context(), r.http.URL, discordfake.BadSignature())
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, res.Status)
	require.Empty(t, r.h.seen, "nothing ran")
	require.Empty(t, r.fake.Threads("C1"))
}

// A body past the cap is refused as too large (not cut, then reported as a forgery), and only POST
// is served.
func TestHTTPInteractionsBounds(t *testing.T) {
	r := newRig(t, nil)
	r.fake.GuildChannel("G1", "C1")
	in := r.fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": strings.Repeat("a", bot.MaxPlatformBody)})
	res, err := r.fake.PostInteraction(t.Context(), r.http.URL, in)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, res.Status)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.http.URL, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Empty(t, r.h.seen, "nothing ran")
}

// TestNotAcceptedIsNotDeferred: a command the bot could not take (store down) is not deferred but
// answered privately, with the log's ref, over the gateway and over HTTP alike. Over HTTP it was
// answered 503, so the user saw only Discord's "interaction failed", with nothing to quote.
func TestNotAcceptedIsNotDeferred(t *testing.T) {
	for _, via := range []string{"gateway", "http"} {
		t.Run(via, func(t *testing.T) {
			r := newRig(t, nil)
			r.h.mu.Lock()
			r.h.refuse = true
			r.h.mu.Unlock()
			u := discordfake.Person("U1")
			dm := r.fake.DMChannel(u)
			in := r.fake.Slash(dm, u, "ask", map[string]string{"prompt": "x"})
			got := answerOf(t, r, via, in)
			require.Equal(t, "x", r.next(t).Text)
			require.Contains(t, got.Content, "I could not take that message")
			require.Contains(t, got.Content, "; ref ", "the log has the error under a ref")
			require.NotContains(t, got.Content, "database is down", "not the raw error")
			require.Equal(t, int(discordgo.InteractionResponseChannelMessageWithSource), got.Type, "answered, not deferred")
			require.Equal(t, int(discordgo.MessageFlagsEphemeral), got.Flags)
		})
	}
}

// interactionAnswer is an interaction's initial response as the user sees it.
type interactionAnswer struct {
	Type    int
	Content string
	Flags   int
}

// answerOf sends in over via ("gateway" or "http") and returns its one initial response.
func answerOf(t *testing.T, r *rig, via string, in *discordfake.Interaction) interactionAnswer {
	t.Helper()
	if via == "gateway" {
		r.fake.DispatchInteraction(in)
		r.wait(t, "the answer", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) > 0 })
		rec, _ := r.fake.Interaction(in.ID)
		require.Len(t, rec.Callbacks, 1)
		return interactionAnswer{rec.Callbacks[0].Type, rec.Callbacks[0].Content, rec.Callbacks[0].Flags}
	}
	res, err := r.fake.PostInteraction(t.Context(), r.http.URL, in)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
	var body struct {
		Type int `json:"type"`
		Data struct {
			Content string `json:"content"`
			Flags   int    `json:"flags"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(res.Body, &body))
	return interactionAnswer{body.Type, body.Data.Content, body.Data.Flags}
}

// TestHTTPInteractionWhileClosingIs503: once the adapter is closing, an HTTP interaction gets 503
// (not an answer): a proxy in front of several replicas may then hand it to one that is not.
func TestHTTPInteractionWhileClosingIs503(t *testing.T) {
	r := newRig(t, nil)
	require.NoError(t, r.ad.Close())
	u := discordfake.Person("U1")
	res, err := r.fake.PostInteraction(t.Context(), r.http.URL, r.fake.Slash(r.fake.DMChannel(u), u, "ask", map[string]string{"prompt": "x"}))
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, res.Status)
	require.Empty(t, r.h.seen, "nothing ran")
}

// TestChannelAskNotTakenLeavesNoSilentThread: /ask in a channel starts its thread before the bot
// takes the question (the thread's id is its key). If the bot then refuses it (store down, queue
// full), the thread says what was asked and that it was not taken, with the ref of the ephemeral
// answer: never an empty thread nobody explains.
func TestChannelAskNotTakenLeavesNoSilentThread(t *testing.T) {
	for _, via := range []string{"gateway", "http"} {
		t.Run(via, func(t *testing.T) {
			r := newRig(t, nil)
			r.h.mu.Lock()
			r.h.refuse = true
			r.h.mu.Unlock()
			r.fake.GuildChannel("G1", "C1")
			in := r.fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "make a thing"})
			got := answerOf(t, r, via, in)
			r.next(t)
			require.NoError(t, r.ad.Close()) // waits for the refusal's posts
			for _, th := range r.fake.Threads("C1") {
				said := r.said(th.ID)
				require.Contains(t, said, "<@U1> asked: make a thing", "thread %s", th.ID)
				require.Contains(t, said, "I could not take that message")
				require.NotContains(t, said, "database is down", "not the raw error")
				ref := said[strings.Index(said, "; ref "):]
				require.Contains(t, got.Content, ref[:strings.Index(ref, ")")], "one ref for one refusal")
			}
		})
	}
}

// TestGatewayMessageNotTakenIsAnswered: the gateway never delivers a message again, so one the bot
// could not take gets ❌ and a line asking for it again, in its channel (no thread is started).
func TestGatewayMessageNotTakenIsAnswered(t *testing.T) {
	for _, where := range []string{"dm", "channel"} {
		t.Run(where, func(t *testing.T) {
			r := newRig(t, nil)
			r.h.mu.Lock()
			r.h.refuse = true
			r.h.mu.Unlock()
			u := discordfake.Person("U1")
			var m discordfake.Message
			channel := "C1"
			if where == "dm" {
				channel = r.fake.DMChannel(u)
				m = r.fake.DM(u, "hi")
			} else {
				m = r.fake.Mention("G1", channel, u, "build it")
			}
			r.next(t)
			r.wait(t, "the refusal", func() bool {
				return strings.Contains(r.said(channel), "I could not take that message") &&
					slices.Contains(r.fake.Reactions(channel, m.ID), "❌")
			})
			require.NotContains(t, r.said(channel), "database is down", "not the raw error")
			require.Empty(t, r.fake.Threads(channel), "no thread started for a message not taken")
		})
	}
}

func TestAnswerWaitsOutA429(t *testing.T) {
	r := newRig(t, nil)
	dm := r.fake.DMChannel(discordfake.Person("U1"))
	r.fake.RateLimit(http.MethodPost, "/channels/"+dm+"/messages", 700*time.Millisecond, 1)
	start := time.Now()
	r.fake.DM(discordfake.Person("U1"), "hi")
	r.next(t)
	r.wait(t, "the answer", func() bool { return len(r.fake.BotMessages(dm)) == 1 })
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond, "delayed by retry_after")
	var limited int
	for _, q := range r.fake.Requests() {
		if q.Status == http.StatusTooManyRequests {
			limited++
		}
	}
	require.Equal(t, 1, limited)
}

// TestRestoredReplierAnswersLikeTheOriginal: a turn taken over by another process (acknowledged
// means answered) is answered in the same thread, which that process starts if need be.
func TestRestoredReplierAnswersLikeTheOriginal(t *testing.T) {
	quiet := &recorder{seen: make(chan bot.Message, 8)}
	r := newRig(t, func(o *discord.Options) { o.Handler = quiet })
	m := r.fake.Mention("G1", "C1", discordfake.Person("U1"), "take me over")
	got := r.next(t)
	other, err := discord.New(discord.Options{BotToken: r.fake.Options().BotToken, ApplicationID: r.fake.Options().AppID,
		APIURL: r.fake.APIURL(), Handler: quiet})
	require.NoError(t, err)
	rep, err := other.Restore(got.Reply)
	require.NoError(t, err)
	require.NoError(t, rep.Post(t.Context(), "answered elsewhere"))
	require.NoError(t, rep.React(t.Context(), bot.ReactDone))
	require.Equal(t, []string{"answered elsewhere"}, contents(r.fake.BotMessages(m.ID)), "in the thread started from the message")
	require.Equal(t, []string{"✅"}, r.fake.Reactions("C1", m.ID))
	_, err = other.Restore([]byte(`{}`))
	require.Error(t, err, "an address without a channel")
}

func TestRateLimitsAnswerOncePolitely(t *testing.T) {
	r := newRig(t, func(o *discord.Options) {
		o.RateLimit = bot.RateLimit{UserMessages: 1, ChannelMessages: -1, Window: time.Hour}
	})
	u := discordfake.Person("U1")
	dm := r.fake.DMChannel(u)
	r.fake.DM(u, "one")
	require.Equal(t, "one", r.next(t).Text)
	r.fake.DM(u, "two")
	r.fake.DM(u, "three")
	r.fake.DM(u, "stop") // control commands get through
	require.Equal(t, "stop", r.next(t).Text)
	r.wait(t, "the notice", func() bool { return strings.Contains(r.said(dm), "more than 1 messages in 1 hour") })
	require.Equal(t, 1, strings.Count(r.said(dm), "more than 1 messages"), "said once")
	require.Empty(t, r.h.seen, "two and three were dropped")
}

// TestSlashUseIsTheUseCommand: /use provider:<name> reaches the bot as the in-thread "use" command.
func TestSlashUseIsTheUseCommand(t *testing.T) {
	r := newRig(t, nil)
	r.fake.Mention("G1", "C1", discordfake.Person("U1"), "start")
	r.next(t)
	var thread []discordfake.Channel
	r.wait(t, "thread", func() bool { thread = r.fake.Threads("C1"); return len(thread) == 1 })
	r.fake.DispatchInteraction(r.fake.Slash(thread[0].ID, discordfake.Person("U1"), "use", map[string]string{"provider": " daytona "}))
	got := r.next(t)
	require.Equal(t, "use daytona", got.Text)
	require.Equal(t, "discord:G1:"+thread[0].ID, got.Thread.String())
}

// TestSlashRuntimeIsTheRuntimeCommand: /runtime name:<name> reaches the bot as the in-thread "runtime"
// command.
func TestSlashRuntimeIsTheRuntimeCommand(t *testing.T) {
	r := newRig(t, nil)
	r.fake.Mention("G1", "C1", discordfake.Person("U1"), "start")
	r.next(t)
	var thread []discordfake.Channel
	r.wait(t, "thread", func() bool { thread = r.fake.Threads("C1"); return len(thread) == 1 })
	r.fake.DispatchInteraction(r.fake.Slash(thread[0].ID, discordfake.Person("U1"), "runtime", map[string]string{"name": " shell "}))
	got := r.next(t)
	require.Equal(t, "runtime shell", got.Text)
	require.Equal(t, "discord:G1:"+thread[0].ID, got.Thread.String())
}
