package discord_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/discord"
	"github.com/threadbox/threadbox/bot/discord/discordfake"
)

func mentioning(u discordfake.User) discordfake.MessageOption {
	return func(m *discordfake.Message) { m.Mentions = append(m.Mentions, u) }
}

func texts(em bot.EarlierMessages) []string {
	var out []string
	for _, m := range em.Messages {
		out = append(out, m.Author+": "+m.Text)
	}
	return out
}

// TestMentionInAThreadReadsTheThreadBefore: the bot mentioned in a thread people started reads the
// thread before the mention when the turn runs (never on the gateway's reader): its first message
// and the newest, within discord.context_messages, over several pages of history; not its own
// posts, not system messages; mentions as names, attachments by name; other bots marked. A process
// that took the turn over reads the same through ReadEarlier.
func TestMentionInAThreadReadsTheThreadBefore(t *testing.T) {
	r := newRig(t, func(o *discord.Options) { o.ContextMessages = 5 })
	alice, bob := discordfake.Person("11"), discordfake.Person("12")
	ci := discordfake.User{ID: "13", Username: "ci", Bot: true}
	r.fake.GuildChannel("G1", "C1")
	th := r.fake.UserThread("C1", alice, "login")
	r.fake.Say(th, alice, "We need to fix the login page <@12>", mentioning(bob))
	for i := range 150 {
		r.fake.Say(th, bob, fmt.Sprintf("step %d", i))
	}
	r.fake.Say(th, r.fake.BotUser(), "an old answer of mine")
	r.fake.Say(th, ci, "build 7 failed")
	r.fake.Say(th, bob, "", discordfake.WithAttachment("trace.txt", []byte("boom")))
	before := len(r.fake.Requests())
	r.fake.MentionIn(th, alice, "please fix it")
	msg := r.next(t)
	require.Equal(t, bot.DiscordThread("G1", th), msg.Thread)
	require.NotNil(t, msg.Earlier)
	for _, req := range r.fake.Requests()[before:] {
		require.False(t, req.Method == "GET" && strings.HasSuffix(req.Path, "/messages"), "nothing read before the turn runs: %s %s", req.Method, req.Path)
	}

	em, err := msg.Earlier.Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{
		"user11: We need to fix the login page @user12",
		"user12: step 148",
		"user12: step 149",
		"ci: build 7 failed",
		"user12: [attached: trace.txt]",
	}, texts(em))
	require.True(t, em.Messages[3].Bot)
	require.False(t, em.Messages[0].Bot)
	require.False(t, em.Messages[0].At.IsZero())
	require.Equal(t, 153-5, em.Omitted, "every earlier message but the bot's own was seen")
	reads := 0
	for _, req := range r.fake.Requests() {
		if req.Method == "GET" && strings.HasSuffix(req.Path, "/channels/"+th+"/messages") {
			reads++
			require.Equal(t, 200, req.Status)
		}
	}
	require.Equal(t, 2, reads, "two pages of 100 to reach the thread's start")

	again, err := r.ad.ReadEarlier(t.Context(), msg.Earlier.Ref)
	require.NoError(t, err)
	require.Equal(t, em, again, "a takeover reads the same")
	_, err = r.ad.ReadEarlier(t.Context(), "nonsense")
	require.Error(t, err)
}

// TestMentionInAChannelReadsTheChannelBefore: a mention in a channel (which starts a thread) reads
// the newest channel messages before it, capped by characters too; there is no first message to
// keep. A DM reads nothing, and context_messages < 0 turns reading off.
func TestMentionInAChannelReadsTheChannelBefore(t *testing.T) {
	r := newRig(t, func(o *discord.Options) { o.ContextMessages, o.ContextChars = 10, 300 })
	alice, bob := discordfake.Person("21"), discordfake.Person("22")
	r.fake.GuildChannel("G1", "C2")
	r.fake.Say("C2", alice, "old chatter")
	r.fake.Mention("G1", "C2", bob, "another request, answered in a thread of its own")
	require.Equal(t, "another request, answered in a thread of its own", r.next(t).Text)
	r.fake.Say("C2", bob, strings.Repeat("a", 300))
	r.fake.Say("C2", alice, strings.Repeat("b", 300))
	r.fake.Say("C2", bob, "the newest")
	m := r.fake.Mention("G1", "C2", alice, "summarise")
	r.fake.Say("C2", bob, "after the mention")
	msg := r.next(t)
	require.Equal(t, bot.DiscordThread("G1", m.ID), msg.Thread)
	require.NotNil(t, msg.Earlier)
	em, err := msg.Earlier.Read(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{"user21: " + strings.Repeat("b", 289) + "…", "user22: the newest"}, texts(em))
	require.Equal(t, 2, em.Omitted, "the other thread's request is not part of this conversation")

	r.fake.DM(alice, "hello")
	require.Nil(t, r.next(t).Earlier, "a DM has no earlier messages to read")

	off := newRig(t, func(o *discord.Options) { o.ContextMessages = -1 })
	off.fake.GuildChannel("G1", "C3")
	off.fake.Say("C3", alice, "something")
	off.fake.Mention("G1", "C3", alice, "go")
	require.Nil(t, off.next(t).Earlier)
}
