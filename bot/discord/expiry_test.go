package discord_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/discord"
	"github.com/threadbox/threadbox/bot/discord/discordfake"
)

// keeper hands each message's replier to the test and answers nothing itself.
type keeper struct{ got chan bot.Replier }

func (k *keeper) Handle(_ context.Context, _ bot.Message, r bot.Replier) error {
	k.got <- r
	return nil
}

// gatedAdmin answers once released.
type gatedAdmin struct{ release chan struct{} }

func (g *gatedAdmin) Run(ctx context.Context, _ string, _ []string) (string, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return "secret admin output", nil
}

// Once an interaction's token has expired (15 minutes: a long turn), ordinary answers go to the
// channel, but what only the user was to see must not: PostPrivate says ErrNoPrivate, and an admin
// command's output is replaced by a notice.
func TestExpiredTokenNeverMakesPrivateRepliesPublic(t *testing.T) {
	k := &keeper{got: make(chan bot.Replier, 4)}
	admin := &gatedAdmin{release: make(chan struct{})}
	r := newRig(t, func(o *discord.Options) { o.Handler = k; o.Admin = admin })
	r.fake.GuildChannel("G1", "C1")
	th := r.fake.UserThread("C1", discordfake.Person("U1"), "t")
	cases := []struct {
		name    string
		command string
		run     func(t *testing.T, in *discordfake.Interaction)
		public  string // what must appear in the thread
	}{
		{"public answer falls back to the channel", "ask", func(t *testing.T, in *discordfake.Interaction) {
			rp := <-k.got
			r.wait(t, "deferred", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) == 1 })
			r.fake.ExpireToken(in.ID)
			require.NoError(t, rp.Post(t.Context(), "public answer"))
		}, "public answer"},
		{"private post", "ask", func(t *testing.T, in *discordfake.Interaction) {
			rp := <-k.got
			r.wait(t, "deferred", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) == 1 })
			r.fake.ExpireToken(in.ID)
			err := rp.(bot.PrivatePoster).PostPrivate(t.Context(), "U1", "secret private text")
			require.ErrorIs(t, err, bot.ErrNoPrivate)
		}, ""},
		{"admin command", "threadbox", func(t *testing.T, in *discordfake.Interaction) {
			r.wait(t, "deferred", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) == 1 })
			r.fake.ExpireToken(in.ID)
			close(admin.release)
			r.wait(t, "the notice", func() bool { return strings.Contains(r.said(th), discord.AdminExpiredText) })
		}, discord.AdminExpiredText},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(r.fake.BotMessages(th))
			in := r.fake.Slash(th, discordfake.Person("U1"), c.command, map[string]string{"prompt": "q", "command": "sessions"})
			r.fake.DispatchInteraction(in)
			c.run(t, in)
			var posted []string
			for _, m := range r.fake.BotMessages(th)[before:] {
				if m.Content != "" {
					posted = append(posted, m.Content)
				}
			}
			if c.public == "" {
				require.Empty(t, posted)
			} else {
				require.Equal(t, []string{c.public}, posted)
			}
			require.NotContains(t, r.said(th), "secret")
		})
	}
}

// An interaction's @original deleted (by a moderator) before the answer: the answer goes to the
// channel rather than being lost, and so do later ones.
func TestDeletedOriginalStillGetsTheAnswer(t *testing.T) {
	k := &keeper{got: make(chan bot.Replier, 4)}
	r := newRig(t, func(o *discord.Options) { o.Handler = k })
	r.fake.GuildChannel("G1", "C1")
	th := r.fake.UserThread("C1", discordfake.Person("U1"), "t")
	in := r.fake.Slash(th, discordfake.Person("U1"), "ask", map[string]string{"prompt": "q"})
	r.fake.DispatchInteraction(in)
	rp := <-k.got
	r.wait(t, "deferred", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) == 1 })
	rec, _ := r.fake.Interaction(in.ID)
	r.fake.DeleteMessage(th, rec.OriginalID)
	require.NoError(t, rp.Post(t.Context(), "the answer"))
	require.NoError(t, rp.Post(t.Context(), "more"))
	require.Equal(t, "the answer\nmore", r.said(th))
}

// A turn longer than the token's 15 minutes keeps showing progress: in the channel once @original
// can no longer be edited.
func TestProgressAfterTheTokenExpiredGoesToTheChannel(t *testing.T) {
	k := &keeper{got: make(chan bot.Replier, 4)}
	r := newRig(t, func(o *discord.Options) { o.Handler = k })
	r.fake.GuildChannel("G1", "C1")
	th := r.fake.UserThread("C1", discordfake.Person("U1"), "t")
	in := r.fake.Slash(th, discordfake.Person("U1"), "ask", map[string]string{"prompt": "q"})
	r.fake.DispatchInteraction(in)
	rp := <-k.got
	r.wait(t, "deferred", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) == 1 })
	require.NoError(t, rp.Progress(t.Context(), "step 1"))
	r.fake.ExpireToken(in.ID)
	require.NoError(t, rp.Progress(t.Context(), "step 2"))
	require.NoError(t, rp.Progress(t.Context(), "step 3"))
	require.Contains(t, r.said(th), "step 3")
}

// A slash command answered only privately (a refusal, an admin command's output) does not leave
// its public @original "thinking" forever: it is resolved without the private text.
func TestPrivateAnswerResolvesThePublicOriginal(t *testing.T) {
	k := &keeper{got: make(chan bot.Replier, 4)}
	r := newRig(t, func(o *discord.Options) { o.Handler = k })
	r.fake.GuildChannel("G1", "C1")
	th := r.fake.UserThread("C1", discordfake.Person("U1"), "t")
	in := r.fake.Slash(th, discordfake.Person("U1"), "ask", map[string]string{"prompt": "q"})
	r.fake.DispatchInteraction(in)
	rp := <-k.got
	r.wait(t, "deferred", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) == 1 })
	require.NoError(t, rp.(bot.PrivatePoster).PostPrivate(t.Context(), "U1", "secret refusal"))
	rec, _ := r.fake.Interaction(in.ID)
	require.Len(t, rec.FollowupIDs, 1)
	f, _ := r.fake.Message(th, rec.FollowupIDs[0])
	require.Equal(t, "secret refusal", f.Content)
	require.NotZero(t, f.Flags&64, "the follow-up is ephemeral")
	orig, _ := r.fake.Message(th, rec.OriginalID)
	require.NotEmpty(t, orig.Content, "@original resolved")
	require.NotContains(t, orig.Content, "secret")
}

// A DM is seen by its user alone: what is private is posted there (an admin command sent as a DM
// gets its output, not a pointer to /threadbox). A thread has no private post.
func TestPrivatePostsInADM(t *testing.T) {
	k := &keeper{got: make(chan bot.Replier, 4)}
	r := newRig(t, func(o *discord.Options) { o.Handler = k })
	u := discordfake.Person("U1")
	dm := r.fake.DMChannel(u)
	r.fake.DM(u, "admin sessions")
	rp := <-k.got
	require.NoError(t, rp.(bot.PrivatePoster).PostPrivate(t.Context(), "U1", "private output"))
	require.Equal(t, "private output", r.said(dm))

	r.fake.GuildChannel("G1", "C1")
	th := r.fake.UserThread("C1", u, "t")
	r.fake.MentionIn(th, u, "admin sessions")
	rp = <-k.got
	require.ErrorIs(t, rp.(bot.PrivatePoster).PostPrivate(t.Context(), "U1", "private output"), bot.ErrNoPrivate)
	require.Empty(t, r.said(th))
}

// An upload's name (the agent's) goes into a multipart header: CR/LF in it would add header lines
// of the agent's choosing. It is sent, and returned, as bot.FileName makes it.
func TestUploadNameIsSanitised(t *testing.T) {
	k := &keeper{got: make(chan bot.Replier, 4)}
	r := newRig(t, func(o *discord.Options) { o.Handler = k })
	u := discordfake.Person("U1")
	dm := r.fake.DMChannel(u)
	r.fake.DM(u, "hi")
	rp := <-k.got
	hostile := "out\r\nContent-Type: text/html\r\n.txt"
	id, err := rp.Upload(t.Context(), hostile, []byte("data"))
	require.NoError(t, err)
	require.Equal(t, bot.FileName(hostile), id)
	ms := r.fake.BotMessages(dm)
	require.Len(t, ms, 1)
	require.Len(t, ms[0].Attachments, 1)
	require.Equal(t, bot.FileName(hostile), ms[0].Attachments[0].Filename)
	require.Equal(t, "application/octet-stream", ms[0].Attachments[0].ContentType)
}

// In an interaction the progress is @original until the answer replaces it. A progress update that
// comes after the answer (the final state, refused by a rate limit and sent again after the wait)
// has no message left to edit: it must not add a stray one after the answer.
func TestProgressAfterTheAnswerReplacedOriginalIsDropped(t *testing.T) {
	k := &keeper{got: make(chan bot.Replier, 4)}
	r := newRig(t, func(o *discord.Options) { o.Handler = k })
	r.fake.GuildChannel("G1", "C1")
	th := r.fake.UserThread("C1", discordfake.Person("U1"), "t")
	in := r.fake.Slash(th, discordfake.Person("U1"), "ask", map[string]string{"prompt": "q"})
	r.fake.DispatchInteraction(in)
	rp := <-k.got
	r.wait(t, "deferred", func() bool { rec, _ := r.fake.Interaction(in.ID); return len(rec.Callbacks) == 1 })
	require.NoError(t, rp.Progress(t.Context(), "working…"))
	require.NoError(t, rp.Post(t.Context(), "the answer"))
	require.NoError(t, rp.Progress(t.Context(), "done in 12s"))
	require.Equal(t, "the answer", r.said(th))
}
