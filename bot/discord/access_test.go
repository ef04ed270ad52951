package discord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/discord"
	"github.com/threadbox/threadbox/bot/discord/discordfake"
)

// TestSlashAskFromARefusedUserOpensNoThread: /ask in a channel starts a thread before the bot sees
// the message, so the access policy must be applied first. Otherwise a user the policy refuses (or
// any user, in a guild or channel it refuses) makes the bot open threads named by them and post
// "<@user> asked: <their text>" in them.
func TestSlashAskFromARefusedUserOpensNoThread(t *testing.T) {
	h := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Users: []string{"discord:UOK"}}}, nil, nil, nil,
		zaptest.NewLogger(t))
	r := newRig(t, func(o *discord.Options) { o.Handler = h })
	r.fake.GuildChannel("G1", "C1")
	in := r.fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "spam spam spam"})
	res, err := r.fake.PostInteraction(t.Context(), r.http.URL, in)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status)
	var resp struct {
		Type int `json:"type"`
		Data struct {
			Content string `json:"content"`
			Flags   int    `json:"flags"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(res.Body, &resp))
	require.Equal(t, 4, resp.Type, "answered at once: %s", res.Body)
	require.Contains(t, resp.Data.Content, "only work for the people")
	require.Equal(t, 64, resp.Data.Flags, "ephemeral")
	require.Empty(t, r.fake.Threads("C1"), "no thread was started for a refused user")
	require.NoError(t, h.Wait(t.Context()))
}

// gated records messages like recorder, and applies a real access policy as bot.Handler does.
type gated struct {
	*recorder
	bot.Gate
}

// TestSlashAskInAnAllowedChannelIsAdmitted: with a channel allowlist, /ask in a listed channel is let
// through, and so is the message in the thread it starts (matched by its parent channel).
func TestSlashAskInAnAllowedChannelIsAdmitted(t *testing.T) {
	policy := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Channels: []string{"discord:C1"}}}, nil, nil, nil, nil)
	rec := &recorder{seen: make(chan bot.Message, 8), answer: func(m bot.Message) string { return "re: " + m.Text }}
	r := newRig(t, func(o *discord.Options) { o.Handler = gated{rec, policy} })
	r.fake.GuildChannel("G1", "C1")
	in := r.fake.Slash("C1", discordfake.Person("U1"), "ask", map[string]string{"prompt": "make a thing"})
	res, err := r.fake.PostInteraction(t.Context(), r.http.URL, in)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":5}`, string(res.Body))
	var got bot.Message
	select {
	case got = <-rec.seen:
	case <-time.After(waitTimeout):
		t.Fatal("no message handled")
	}
	require.Len(t, r.fake.Threads("C1"), 1)
	require.Equal(t, "C1", got.ParentChannelID)
	require.Empty(t, policy.Refusal(got), "the thread's message passes the channel allowlist")
}

// TestRefusedMessageIsToldWhy: a message the access policy refuses outside an interaction is answered
// with the refusal. Discord has no private message there, and the refusal is not secret; it was
// replaced by the note meant for admin output ("use the /threadbox slash command").
func TestRefusedMessageIsToldWhy(t *testing.T) {
	h := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Users: []string{"discord:UOK"}}}, nil, nil, nil,
		zaptest.NewLogger(t))
	r := newRig(t, func(o *discord.Options) { o.Handler = h })
	u := discordfake.Person("U1")
	dm := r.fake.DMChannel(u)
	r.fake.DM(u, "hello")
	r.wait(t, "an answer", func() bool { return len(r.fake.BotMessages(dm)) > 0 })
	require.Contains(t, r.said(dm), "only work for the people")
	require.NotContains(t, r.said(dm), "Admin commands")
}

// TestChannelAllowlistAdmitsItsThreads: with access.channels listing a Discord channel, a mention in
// it and a message in a thread of it (one this process never saw start) are admitted. Neither
// carried the channel they belong to, so the allowlist refused every Discord message.
func TestChannelAllowlistAdmitsItsThreads(t *testing.T) {
	policy := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Channels: []string{"discord:C1"}}}, nil, nil, nil, nil)
	rec := &recorder{seen: make(chan bot.Message, 8)}
	r := newRig(t, func(o *discord.Options) { o.Handler = gated{rec, policy} })
	u := discordfake.Person("U1")
	r.fake.GuildChannel("G1", "C1")
	r.fake.GuildChannel("G1", "C2")
	next := func() bot.Message {
		select {
		case m := <-rec.seen:
			return m
		case <-time.After(waitTimeout):
			t.Fatal("no message handled")
			return bot.Message{}
		}
	}
	r.fake.MentionIn("C1", u, "in the channel")
	require.Empty(t, policy.Refusal(next()))
	r.fake.MentionIn(r.fake.UserThread("C1", u, "theirs"), u, "in a thread of it")
	require.Empty(t, policy.Refusal(next()))
	r.fake.MentionIn(r.fake.UserThread("C2", u, "elsewhere"), u, "in a thread of another channel")
	require.Equal(t, "Sorry, I'm not enabled in this channel. Ask the bot's operator to add it, or mention me in a channel where I work.",
		policy.Refusal(next()))
}

// TestSlashAskOverTheRateLimitOpensNoThread: a /ask in a channel refused by the rate limit leaves
// no empty thread behind; the refusal is the ephemeral answer.
func TestSlashAskOverTheRateLimitOpensNoThread(t *testing.T) {
	r := newRig(t, func(o *discord.Options) {
		o.RateLimit = bot.RateLimit{UserMessages: 1, ChannelMessages: -1, Window: time.Hour}
	})
	r.fake.GuildChannel("G1", "C1")
	u := discordfake.Person("U1")
	first := r.fake.Slash("C1", u, "ask", map[string]string{"prompt": "one"})
	r.fake.DispatchInteraction(first)
	require.Equal(t, "one", r.next(t).Text)
	second := r.fake.Slash("C1", u, "ask", map[string]string{"prompt": "two"})
	r.fake.DispatchInteraction(second)
	r.wait(t, "the refusal", func() bool { rec, _ := r.fake.Interaction(second.ID); return len(rec.Callbacks) == 1 })
	rec, _ := r.fake.Interaction(second.ID)
	require.Equal(t, 4, rec.Callbacks[0].Type)
	require.Contains(t, rec.Callbacks[0].Content, "more than 1 messages")
	require.Len(t, r.fake.Threads("C1"), 1, "no thread for the refused /ask")
}

// policed is a recorder behind a real access policy, as bot.Handler applies it: a refused message is
// counted (Refusal) and goes no further.
type policed struct {
	bot.Gate
	rec *recorder
}

func (p policed) Handle(ctx context.Context, msg bot.Message, r bot.Replier) error {
	if p.Refusal(msg) != "" {
		return nil
	}
	return p.rec.Handle(ctx, msg, r)
}

// TestRefusedStrangersSpendNoRateLimit: the access policy is decided before the rate limit. Refused
// strangers used up the channel's budget (locking the people it admits out of the channel), and past
// it drew the public "skipping messages" notice and 🚫 marks, for messages that were refused anyway.
func TestRefusedStrangersSpendNoRateLimit(t *testing.T) {
	policy := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Users: []string{"discord:UOK"}}}, nil, nil, nil,
		zaptest.NewLogger(t))
	rec := &recorder{seen: make(chan bot.Message, 64)}
	r := newRig(t, func(o *discord.Options) {
		o.Handler = policed{policy, rec}
		o.RateLimit = bot.RateLimit{UserMessages: -1, ChannelMessages: 2, Window: time.Hour}
	})
	r.fake.GuildChannel("G1", "C1")
	ok := discordfake.Person("UOK")
	th := r.fake.UserThread("C1", ok, "shared")
	const strangers = 5
	var refused []discordfake.Message
	for i := range strangers {
		refused = append(refused, r.fake.MentionIn(th, discordfake.Person(fmt.Sprint("U", i)), "let me in"))
	}
	r.fake.MentionIn(th, ok, "one")
	r.fake.MentionIn(th, ok, "two")
	r.fake.MentionIn(th, ok, "help") // exempt from the limit: handled either way, after the rest (SyncEvents)
	var got []string
	for {
		var m bot.Message
		select {
		case m = <-rec.seen:
		case <-time.After(waitTimeout):
			t.Fatal("the last message was not handled")
		}
		got = append(got, m.User.ID+":"+m.Text)
		if m.Text == "help" {
			break
		}
	}
	require.Equal(t, []string{"UOK:one", "UOK:two", "UOK:help"}, got, "the admitted user has the channel's whole budget")
	require.Equal(t, map[string]int64{bot.RefusedUser: strangers}, policy.Refusals(), "each refusal counted once")
	require.NoError(t, r.ad.Close()) // waits for background posts and reactions
	require.NotContains(t, r.said(th), "skipping messages", "no rate-limit notice for refused strangers")
	for _, m := range refused {
		require.NotContains(t, r.fake.Reactions(th, m.ID), "🚫")
	}
}

// TestRefusedStrangersSlashAskSpendsNoRateLimit: /ask in a thread or a DM is weighed against the
// access policy before the rate limit, as a mention is. It was limited first, so refused strangers'
// /ask in a shared thread used up its budget, locking out the person the policy admits, and drew
// "skipping messages" notices for commands that were refused anyway.
func TestRefusedStrangersSlashAskSpendsNoRateLimit(t *testing.T) {
	policy := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Users: []string{"discord:UOK"}}}, nil, nil, nil,
		zaptest.NewLogger(t))
	rec := &recorder{seen: make(chan bot.Message, 64)}
	r := newRig(t, func(o *discord.Options) {
		o.Handler = policed{policy, rec}
		o.RateLimit = bot.RateLimit{UserMessages: 2, ChannelMessages: 2, Window: time.Hour}
	})
	r.fake.GuildChannel("G1", "C1")
	ok := discordfake.Person("UOK")
	th := r.fake.UserThread("C1", ok, "shared")
	stranger := discordfake.Person("U0")
	ask := func(channel string, u discordfake.User, prompt string) string {
		t.Helper()
		res, err := r.fake.PostInteraction(t.Context(), r.http.URL, r.fake.Slash(channel, u, "ask", map[string]string{"prompt": prompt}))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.Status)
		return string(res.Body)
	}
	for i := range 5 {
		require.NotContains(t, ask(th, discordfake.Person(fmt.Sprint("U", i)), "let me in"), "more than", "stranger %d in the thread", i)
	}
	for i := range 3 {
		require.NotContains(t, ask(r.fake.DMChannel(stranger), stranger, "let me in"), "more than", "stranger's DM %d", i)
	}
	require.JSONEq(t, `{"type":5}`, ask(th, ok, "one"))
	require.JSONEq(t, `{"type":5}`, ask(th, ok, "two"), "the channel's budget is the admitted user's")
	require.Equal(t, "one", (<-rec.seen).Text)
	require.Equal(t, "two", (<-rec.seen).Text)
	require.Contains(t, ask(r.fake.DMChannel(ok), ok, "three"), "more than 2 messages", "the user's own limit still holds")
	require.Equal(t, map[string]int64{bot.RefusedUser: 8}, policy.Refusals(), "each refusal counted once")
}

// TestRefusedMentionOpensNoThread: a mention in a channel from a user the policy refuses starts no
// thread; the refusal is posted in the channel, where the mention is. The thread, named after their
// text, was started before the refusal (its first post), so strangers could open threads at will.
func TestRefusedMentionOpensNoThread(t *testing.T) {
	h := bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{Users: []string{"discord:UOK"}}}, nil, nil, nil,
		zaptest.NewLogger(t))
	r := newRig(t, func(o *discord.Options) { o.Handler = h })
	r.fake.Mention("G1", "C1", discordfake.Person("U1"), "spam spam spam")
	// Waited for as the fake sees it: Handler.Wait may not race the handling still under way (a
	// WaitGroup's Add at zero must come before its Wait).
	r.wait(t, "the refusal posted", func() bool { return strings.Contains(r.said("C1"), "only work for the people") })
	require.NoError(t, r.ad.Close()) // anything the adapter started is done
	require.Equal(t, int64(1), h.Refusals()[bot.RefusedUser])
	require.Empty(t, r.fake.Threads("C1"), "no thread was started for a refused user")
}
