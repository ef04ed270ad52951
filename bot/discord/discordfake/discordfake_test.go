package discordfake_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/discord/discordfake"
)

// The fake is proven against discordgo used as a plain client: every route and gateway behaviour the
// bot relies on, through the library's own code paths.

// rewrite sends discordgo's https://discord.com/api/v9/… requests to the fake.
type rewrite struct{ base string }

func (rw rewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	rest := strings.TrimPrefix(r.URL.Path, "/api/v"+discordgo.APIVersion)
	u := rw.base + rest
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	nu, err := r.URL.Parse(u)
	if err != nil {
		return nil, err
	}
	r.URL, r.Host = nu, nu.Host
	return http.DefaultTransport.RoundTrip(r)
}

// wait is generous: under -race on two shared cores a reconnect (discordgo sleeps 1 s in Close) can be slow.
const wait = 30 * time.Second

func waitFor(t *testing.T, fake *discordfake.Server, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	require.NoError(t, fake.Wait(ctx, cond))
}

func session(t *testing.T, fake *discordfake.Server) *discordgo.Session {
	t.Helper()
	s, err := discordgo.New("Bot " + fake.Options().BotToken)
	require.NoError(t, err)
	s.Client = &http.Client{Transport: rewrite{base: fake.APIURL()}}
	s.StateEnabled = false
	s.SyncEvents = true
	s.LogLevel = -1
	s.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages | discordgo.IntentMessageContent
	return s
}

func TestGatewayAndRESTWithDiscordgo(t *testing.T) {
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	s := session(t, fake)
	got := make(chan *discordgo.MessageCreate, 16)
	s.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { got <- m })
	require.NoError(t, s.Open())
	t.Cleanup(func() { _ = s.Close() })
	st := fake.Gateway()
	require.Equal(t, 1, st.Identifies)
	require.Equal(t, int(s.Identify.Intents), st.Intents, "Identify carries the intents")
	waitFor(t, fake, func() bool { return fake.Gateway().Heartbeats >= 1 }) // discordgo heartbeats at once

	m := fake.Mention("G1", "C1", discordfake.Person("U1"), "hello", discordfake.WithAttachment("a.txt", []byte("data")))
	var ev *discordgo.MessageCreate
	select {
	case ev = <-got:
	case <-time.After(wait):
		t.Fatal("no MESSAGE_CREATE")
	}
	require.Equal(t, m.ID, ev.ID)
	require.Equal(t, "G1", ev.GuildID)
	require.Equal(t, "U1", ev.Author.ID)
	require.Len(t, ev.Mentions, 1)
	require.Equal(t, fake.BotUser().ID, ev.Mentions[0].ID)
	require.Len(t, ev.Attachments, 1)
	resp, err := http.Get(ev.Attachments[0].URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, "data", string(body), "the attachment URL serves its bytes")

	th, err := s.MessageThreadStartComplex("C1", m.ID, &discordgo.ThreadStart{Name: "hello", AutoArchiveDuration: 1440})
	require.NoError(t, err)
	require.Equal(t, m.ID, th.ID, "a thread started from a message has the message's id")
	require.Equal(t, discordgo.ChannelTypeGuildPublicThread, th.Type)
	_, err = s.MessageThreadStartComplex("C1", m.ID, &discordgo.ThreadStart{Name: "again"})
	var rerr *discordgo.RESTError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 160004, rerr.Message.Code)

	require.NoError(t, s.MessageReactionAdd("C1", m.ID, "👀"))
	require.Equal(t, []string{"👀"}, fake.Reactions("C1", m.ID))
	require.NoError(t, s.MessageReactionRemove("C1", m.ID, "👀", "@me"))
	require.Empty(t, fake.Reactions("C1", m.ID))
	require.NoError(t, s.ChannelTyping(th.ID))
	require.Equal(t, 1, fake.Typing(th.ID))

	sent, err := s.ChannelMessageSendComplex(th.ID, &discordgo.MessageSend{Content: "here",
		Files: []*discordgo.File{{Name: "out.txt", ContentType: "text/plain", Reader: bytes.NewReader([]byte("bytes"))}}})
	require.NoError(t, err)
	require.Len(t, sent.Attachments, 1)
	msgs := fake.BotMessages(th.ID)
	require.Len(t, msgs, 1)
	require.Equal(t, "out.txt", msgs[0].Attachments[0].Filename)
	require.Equal(t, "bytes", string(msgs[0].Attachments[0].Data), "multipart files[0] with payload_json")
	edited := "there"
	_, err = s.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: sent.ID, Channel: th.ID, Content: &edited})
	require.NoError(t, err)
	msgs = fake.BotMessages(th.ID)
	require.Equal(t, "there", msgs[0].Content)
	require.Equal(t, []string{"here"}, msgs[0].Edits)

	_, err = s.ChannelMessageSend(th.ID, strings.Repeat("x", 2001))
	require.ErrorAs(t, err, &rerr, "over 2000 characters is refused")
	_, err = s.ChannelMessageSend("404", "x")
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, http.StatusNotFound, rerr.Response.StatusCode)
	require.Equal(t, 10003, rerr.Message.Code)

	fake.RateLimit(http.MethodPost, "/channels/"+th.ID+"/messages", 1500*time.Millisecond, 1)
	_, err = s.ChannelMessageSend(th.ID, "limited", discordgo.WithRetryOnRatelimit(false))
	var rl *discordgo.RateLimitError
	require.ErrorAs(t, err, &rl)
	require.Equal(t, 1500*time.Millisecond, rl.RetryAfter, "retry_after in seconds, as a float")

	cmds, err := s.ApplicationCommandBulkOverwrite(fake.Options().AppID, "G1", []*discordgo.ApplicationCommand{{Name: "ask", Description: "ask"}})
	require.NoError(t, err)
	require.Len(t, cmds, 1)
	require.NotEmpty(t, cmds[0].ID)
	require.Len(t, fake.Commands("G1"), 1)
	require.Empty(t, fake.Commands(""))
}

func TestInteractionsWithDiscordgo(t *testing.T) {
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	s := session(t, fake)
	got := make(chan *discordgo.InteractionCreate, 4)
	s.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) { got <- i })
	require.NoError(t, s.Open())
	t.Cleanup(func() { _ = s.Close() })
	fake.GuildChannel("G1", "C1")

	in := fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "hi"})
	fake.DispatchInteraction(in)
	var ic *discordgo.InteractionCreate
	select {
	case ic = <-got:
	case <-time.After(wait):
		t.Fatal("no INTERACTION_CREATE")
	}
	data := ic.ApplicationCommandData()
	require.Equal(t, "ask", data.Name)
	require.Equal(t, "hi", data.Options[0].StringValue())
	require.Equal(t, "U1", ic.Member.User.ID)
	require.NoError(t, s.InteractionRespond(ic.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource}))
	err := s.InteractionRespond(ic.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource})
	var rerr *discordgo.RESTError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 40060, rerr.Message.Code, "a second callback is refused")
	answer := "answer"
	_, err = s.InteractionResponseEdit(ic.Interaction, &discordgo.WebhookEdit{Content: &answer})
	require.NoError(t, err)
	_, err = s.FollowupMessageCreate(ic.Interaction, true, &discordgo.WebhookParams{Content: "more"})
	require.NoError(t, err)
	rec, _ := fake.Interaction(in.ID)
	require.Len(t, rec.Callbacks, 1)
	require.Equal(t, 5, rec.Callbacks[0].Type)
	orig, _ := fake.Message("C1", rec.OriginalID)
	require.Equal(t, "answer", orig.Content)
	require.Len(t, rec.FollowupIDs, 1)

	// A callback after the deadline is Discord's 10062 Unknown interaction.
	late := fake.Slash("C1", discordfake.Person("U1"), "status", nil)
	fake.DispatchInteraction(late)
	ic = <-got
	fake.ExpireInteraction(late.ID) // as if the bot had taken more than the deadline
	err = s.InteractionRespond(ic.Interaction, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource})
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, 10062, rerr.Message.Code)
}

func TestResumeReplaysMissedDispatches(t *testing.T) {
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	s := session(t, fake)
	got := make(chan string, 16)
	s.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) { got <- m.Content })
	resumed := make(chan struct{}, 4)
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Resumed) { resumed <- struct{}{} })
	require.NoError(t, s.Open())
	t.Cleanup(func() { _ = s.Close() })
	fake.GuildChannel("G1", "C1")
	next := func() string {
		select {
		case c := <-got:
			return c
		case <-time.After(wait):
			t.Fatal("no MESSAGE_CREATE")
			return ""
		}
	}

	fake.Say("C1", discordfake.Person("U1"), "one")
	require.Equal(t, "one", next())
	// op 7: discordgo closes, reconnects and resumes; a message sent meanwhile is replayed.
	fake.Reconnect()
	waitFor(t, fake, func() bool { return !fake.Gateway().Connected })
	fake.Say("C1", discordfake.Person("U1"), "two")
	select {
	case <-resumed:
	case <-time.After(wait):
		t.Fatal("not resumed after op 7")
	}
	require.Equal(t, "two", next(), "missed while away, replayed on Resume")
	require.Equal(t, 1, fake.Gateway().Resumes)

	// A dropped socket: the same, and an at-least-once replay repeats a dispatch already seen.
	seq := fake.Gateway().Seq
	fake.Say("C1", discordfake.Person("U1"), "three")
	require.Equal(t, "three", next())
	fake.ReplayOnNextResume(seq)
	fake.DropConnections()
	<-resumed
	require.Equal(t, "three", next(), "replayed again")
	require.Equal(t, 2, fake.Gateway().Resumes)
	require.Equal(t, 1, fake.Gateway().Identifies)

	// op 9 not resumable: discordgo identifies again on the same socket.
	fake.InvalidSession(false)
	waitFor(t, fake, func() bool { return fake.Gateway().Identifies == 2 })
}

func TestHTTPInteractionsAreSignedLikeDiscord(t *testing.T) {
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	key, err := hex.DecodeString(fake.PublicKey())
	require.NoError(t, err)
	verified := make(chan bool, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := discordgo.VerifyInteraction(r, ed25519.PublicKey(key))
		verified <- ok
		if !ok {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"type":5}`))
	}))
	t.Cleanup(srv.Close)
	fake.GuildChannel("G1", "C1")
	in := fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "x"})
	cases := []struct {
		name    string
		signing []discordfake.Signing
		ok      bool
	}{
		{"signed", nil, true},
		{"bad signature", []discordfake.Signing{discordfake.BadSignature()}, false},
		{"unsigned", []discordfake.Signing{discordfake.Unsigned()}, false},
	}
	for _, c := range cases {
		res, err := fake.PostInteraction(t.Context(), srv.URL, in, c.signing...)
		require.NoError(t, err)
		require.Equal(t, c.ok, <-verified, c.name)
		require.Equal(t, c.ok, res.Status == http.StatusOK, c.name)
	}
	rec, _ := fake.Interaction(in.ID)
	require.Len(t, rec.Callbacks, 1, "the deferral in the HTTP answer is the callback")
	require.NotEmpty(t, rec.OriginalID)
}

// TestChannelHistoryWithDiscordgo: GET /channels/{id}/messages pages as Discord's does, newest
// first, with before, after and around, and Discord's errors for a bad limit, two anchors at once
// and an unknown channel.
func TestChannelHistoryWithDiscordgo(t *testing.T) {
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	s := session(t, fake)
	fake.GuildChannel("G", "C")
	var ids []string
	for i := range 7 {
		ids = append(ids, fake.Say("C", discordfake.Person("1"), string(rune('a'+i))).ID)
	}
	text := func(ms []*discordgo.Message) string {
		var b strings.Builder
		for _, m := range ms {
			b.WriteString(m.Content)
		}
		return b.String()
	}
	tests := []struct {
		name                  string
		limit                 int
		before, after, around string
		want                  string
	}{
		{"newest", 3, "", "", "", "gfe"},
		{"before", 2, ids[4], "", "", "dc"},
		{"before the first", 5, ids[0], "", "", ""},
		{"after, still newest first", 2, "", ids[1], "", "dc"},
		{"around", 3, "", "", ids[3], "edc"},
		{"all", 100, "", "", "", "gfedcba"},
	}
	for _, tc := range tests {
		got, err := s.ChannelMessages("C", tc.limit, tc.before, tc.after, tc.around)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, text(got), tc.name)
	}
	_, err := s.ChannelMessages("C", 101, "", "", "")
	requireRESTCode(t, err, http.StatusBadRequest, 50035)
	_, err = s.ChannelMessages("C", 10, ids[3], ids[1], "")
	requireRESTCode(t, err, http.StatusBadRequest, 50035)
	_, err = s.ChannelMessages("nope", 10, "", "", "")
	requireRESTCode(t, err, http.StatusNotFound, 10003)
}

func requireRESTCode(t *testing.T, err error, status, code int) {
	t.Helper()
	var re *discordgo.RESTError
	require.ErrorAs(t, err, &re)
	require.Equal(t, status, re.Response.StatusCode)
	require.NotNil(t, re.Message)
	require.Equal(t, code, re.Message.Code)
}
