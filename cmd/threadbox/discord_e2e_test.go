package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/discord/discordfake"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// discordRig is the real serve wiring (PostgreSQL, Docker with the shell runtime) against the fake
// Discord, over the gateway and HTTP interactions.
type discordRig struct {
	fake  *discordfake.Server
	sv    inProcessServe
	inter string
	admin discordfake.User
}

const discordWait = 3 * time.Minute

func newDiscordRig(t *testing.T) *discordRig {
	t.Helper()
	prov := dockertest.New(t, docker.Options{})
	pg := dbtest.PostgresSchemaURL(t)
	fake := discordfake.New(discordfake.Options{})
	t.Cleanup(fake.Close)
	dep := fmt.Sprintf("discord-e2e-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		list, _ := prov.List(context.Background(), map[string]string{sandbox.LabelDeployment: dep})
		for _, i := range list {
			_ = prov.Destroy(context.Background(), i.Handle)
		}
	})
	admin := discordfake.Person("4242")
	env := []string{
		"THREADBOX_DATABASE_URL=" + pg,
		"THREADBOX_RUNTIME_SECRET=discord-e2e-shared-runtime-secret",
		"THREADBOX_HTTP_ADDR=127.0.0.1:0",
		"THREADBOX_DEPLOYMENT=" + dep,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE=" + dockertest.Image(),
		"THREADBOX_RUNTIME_NAME=shell",
		"THREADBOX_DISCORD_BOT_TOKEN=" + fake.Options().BotToken,
		"THREADBOX_DISCORD_APPLICATION_ID=" + fake.Options().AppID,
		"THREADBOX_DISCORD_PUBLIC_KEY=" + fake.PublicKey(),
		"THREADBOX_DISCORD_API_URL=" + fake.APIURL(),
		"THREADBOX_DISCORD_GUILD_IDS=G1",
		"THREADBOX_DISCORD_MAX_FILE_BYTES=1000",
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s",
		"THREADBOX_ADMIN_USERS=discord:" + admin.ID,
	}
	sv := serveInProcess(t, env)
	t.Cleanup(func() {
		sv.cancel()
		<-sv.done
		_ = sv.m.Close()
	})
	ctx, cancel := context.WithTimeout(t.Context(), discordWait)
	defer cancel()
	require.NoError(t, fake.WaitConnected(ctx))
	return &discordRig{fake: fake, sv: sv, inter: "http://" + sv.addr + "/discord/interactions", admin: admin}
}

func (r *discordRig) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), discordWait)
	defer cancel()
	require.NoError(t, r.fake.Wait(ctx, cond), "waiting for %s", what)
}

// finished waits for ✅ on a message.
func (r *discordRig) finished(t *testing.T, channel, msg string) {
	t.Helper()
	r.wait(t, "✅ on "+msg, func() bool {
		re := r.fake.Reactions(channel, msg)
		return len(re) == 1 && re[0] == "✅"
	})
}

// said returns the bot's messages in a channel, joined.
func (r *discordRig) said(channel string) string {
	var out []string
	for _, m := range r.fake.BotMessages(channel) {
		out = append(out, m.Content)
	}
	return strings.Join(out, "\n")
}

// answered waits until the bot's messages in channel contain want.
func (r *discordRig) answered(t *testing.T, channel, want string) {
	t.Helper()
	r.wait(t, fmt.Sprintf("%q in %s", want, channel), func() bool { return strings.Contains(r.said(channel), want) })
}

func (r *discordRig) requests(method, prefix string, status int) []discordfake.Request {
	var out []discordfake.Request
	for _, q := range r.fake.Requests() {
		if q.Method == method && strings.HasPrefix(q.Path, prefix) && (status == 0 || q.Status == status) {
			out = append(out, q)
		}
	}
	return out
}

func TestServeAnswersDiscord(t *testing.T) {
	r := newDiscordRig(t)
	u1 := discordfake.Person("1001")
	require.Len(t, r.fake.Commands("G1"), 7, "slash commands registered for the guild")

	t.Run("a mention opens a thread: 👀, progress, answer, artifact, ✅; the thread keeps its sandbox", func(t *testing.T) {
		m := r.fake.Mention("G1", "C1", u1, "echo hi > output/display/hi.txt && echo kept > mark && sleep 3 && echo answered")
		r.finished(t, "C1", m.ID)
		require.NotEmpty(t, r.requests(http.MethodPut, "/channels/C1/messages/"+m.ID+"/reactions/👀/@me", http.StatusNoContent), "👀 on receipt")
		th, ok := r.fake.Channel(m.ID)
		require.True(t, ok, "a thread started from the message")
		require.Equal(t, discordfake.ChannelPublicThread, th.Type)
		msgs := r.fake.BotMessages(m.ID)
		require.NotEmpty(t, msgs)
		require.True(t, strings.HasPrefix(msgs[0].Content, "done in") && len(msgs[0].Edits) > 0, "one progress message, edited in place: %+v", msgs[0])
		require.Contains(t, r.said(m.ID), "answered")
		var files []discordfake.Attachment
		for _, bm := range msgs {
			files = append(files, bm.Attachments...)
		}
		require.Len(t, files, 1)
		require.Equal(t, "hi.txt", files[0].Filename)
		require.Equal(t, "hi\n", string(files[0].Data), "the artifact's bytes")
		require.Positive(t, r.fake.Typing(m.ID), "typing indicator")

		again := r.fake.MentionIn(m.ID, u1, "cat mark")
		r.finished(t, m.ID, again.ID)
		require.Contains(t, r.said(m.ID), "kept", "the second mention ran in the same sandbox")
	})

	t.Run("a mention in a thread people started reads the thread before it into the first prompt", func(t *testing.T) {
		u2 := discordfake.Person("1003")
		th := r.fake.UserThread("C1", u1, "deploys")
		r.fake.Say(th, u1, "we deploy on fridays")
		r.fake.Say(th, u2, "no, never on fridays")
		// The shell runtime leaves the context it was given in .threadbox/history.md.
		m := r.fake.MentionIn(th, u1, "cat .threadbox/history.md")
		r.finished(t, th, m.ID)
		said := r.said(th)
		require.Contains(t, said, "we deploy on fridays")
		require.Contains(t, said, "no, never on fridays")
		require.Contains(t, said, "(I read the 2 earlier messages of this thread before your message.)")
		require.NotEmpty(t, r.requests(http.MethodGet, "/channels/"+th+"/messages", http.StatusOK), "read through Discord's REST history")
	})

	t.Run("DMs are answered in the DM and share a sandbox", func(t *testing.T) {
		u := discordfake.Person("1002")
		first := r.fake.DM(u, "echo dm > m && echo one")
		r.finished(t, first.ChannelID, first.ID)
		second := r.fake.DM(u, "cat m")
		r.finished(t, first.ChannelID, second.ID)
		require.Contains(t, r.said(first.ChannelID), "dm")
	})

	t.Run("/ask over the gateway and HTTP is deferred within 3 s and edits @original; in a channel it opens a thread", func(t *testing.T) {
		root := r.fake.Mention("G1", "C2", u1, "echo root")
		r.finished(t, "C2", root.ID)
		gw := r.fake.Slash(root.ID, u1, "ask", map[string]string{"prompt": "echo via-gateway"})
		r.fake.DispatchInteraction(gw)
		dm := r.fake.DMChannel(u1)
		hi := r.fake.Slash(dm, u1, "ask", map[string]string{"prompt": "echo via-http"})
		res, err := r.fake.PostInteraction(t.Context(), r.inter, hi)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.Status)
		require.JSONEq(t, `{"type":5}`, string(res.Body))
		for _, c := range []struct {
			in      *discordfake.Interaction
			channel string
			want    string
		}{{gw, root.ID, "via-gateway"}, {hi, dm, "via-http"}} {
			r.wait(t, "@original holds the answer", func() bool {
				rec, _ := r.fake.Interaction(c.in.ID)
				m, _ := r.fake.Message(c.channel, rec.OriginalID)
				return strings.Contains(m.Content, c.want)
			})
			rec, _ := r.fake.Interaction(c.in.ID)
			require.Len(t, rec.Callbacks, 1)
			require.Equal(t, 5, rec.Callbacks[0].Type)
			require.Less(t, rec.Callbacks[0].At.Sub(rec.Created), 3*time.Second)
		}

		r.fake.GuildChannel("G1", "C3")
		in := r.fake.Slash("C3", u1, "ask", map[string]string{"prompt": "echo in-a-new-thread"})
		r.fake.DispatchInteraction(in)
		r.wait(t, "a thread", func() bool { return len(r.fake.Threads("C3")) == 1 })
		th := r.fake.Threads("C3")[0]
		r.answered(t, th.ID, "in-a-new-thread")
		rec, _ := r.fake.Interaction(in.ID)
		orig, _ := r.fake.Message("C3", rec.OriginalID)
		require.Contains(t, orig.Content, "<#"+th.ID+">", "@original links the thread")
	})

	t.Run("/threadbox sessions: an admin gets it, anyone else is refused ephemerally and audited", func(t *testing.T) {
		r.fake.GuildChannel("G1", "C4")
		for _, c := range []struct {
			user discordfake.User
			want string
		}{{r.admin, "discord:"}, {u1, "limited to the users listed in admin.users"}} {
			in := r.fake.Slash("C4", c.user, "threadbox", map[string]string{"command": "sessions"})
			r.fake.DispatchInteraction(in)
			r.wait(t, "the admin reply", func() bool {
				rec, _ := r.fake.Interaction(in.ID)
				m, _ := r.fake.Message("C4", rec.OriginalID)
				return strings.Contains(m.Content, c.want)
			})
			rec, _ := r.fake.Interaction(in.ID)
			require.Equal(t, 64, rec.Callbacks[0].Flags, "ephemeral")
		}
		st, err := db.Open(t.Context(), r.sv.m.Config.Database.URL)
		require.NoError(t, err)
		defer st.Close()
		audit, err := st.AuditList(t.Context(), db.AuditQuery{})
		require.NoError(t, err)
		var denied bool
		for _, a := range audit {
			denied = denied || (a.Actor == "discord:"+u1.ID && a.Action == "admin sessions" && a.Result == "denied")
		}
		require.True(t, denied, "the refusal is audited: %+v", audit)
	})

	t.Run("HTTP interactions: PING gets PONG; a bad or missing signature is 401 and runs nothing", func(t *testing.T) {
		res, err := r.fake.Ping(t.Context(), r.inter)
		require.NoError(t, err)
		require.JSONEq(t, `{"type":1}`, string(res.Body))
		r.fake.GuildChannel("G1", "C5")
		for _, sg := range []discordfake.Signing{discordfake.BadSignature(), discordfake.Unsigned()} {
			in := r.fake.Slash("C5", u1, "ask", map[string]string{"prompt": "echo forged"})
			res, err := r.fake.PostInteraction(t.Context(), r.inter, in, sg)
			require.NoError(t, err)
			require.Equal(t, http.StatusUnauthorized, res.Status)
		}
		require.Empty(t, r.fake.Threads("C5"), "nothing ran")
	})

	t.Run("after op 7 or a dropped socket the bot resumes; a replayed MESSAGE_CREATE runs once", func(t *testing.T) {
		u := discordfake.Person("1003")
		seq := r.fake.Gateway().Seq
		m := r.fake.DM(u, "echo replay-once")
		r.finished(t, m.ChannelID, m.ID)
		r.fake.ReplayOnNextResume(seq)
		r.fake.DropConnections()
		r.wait(t, "resumed", func() bool { return r.fake.Gateway().Resumes == 1 && r.fake.Gateway().Connected })
		r.fake.Reconnect()
		r.wait(t, "resumed after op 7", func() bool { return r.fake.Gateway().Resumes == 2 && r.fake.Gateway().Connected })
		after := r.fake.DM(u, "echo after-resume")
		r.finished(t, m.ChannelID, after.ID)
		require.Equal(t, 1, strings.Count(r.said(m.ChannelID), "replay-once"), "answered once")
		require.Equal(t, 1, r.fake.Gateway().Identifies)
	})

	t.Run("a 429 on the answer delays it by retry_after; progress edits back off without blocking the turn", func(t *testing.T) {
		u := discordfake.Person("1004")
		dm := r.fake.DMChannel(u)
		r.fake.RateLimitWhen(http.MethodPost, "/channels/"+dm+"/messages", "ANSWER-429", 2*time.Second, 1)
		m := r.fake.DM(u, "echo ANSWER-429")
		r.finished(t, dm, m.ID)
		limited := r.requests(http.MethodPost, "/channels/"+dm+"/messages", http.StatusTooManyRequests)
		require.Len(t, limited, 1)
		var answerAt time.Time
		for _, bm := range r.fake.BotMessages(dm) {
			if strings.Contains(bm.Content, "ANSWER-429") {
				answerAt = bm.At
			}
		}
		require.GreaterOrEqual(t, answerAt.Sub(limited[0].At), 2*time.Second, "waited retry_after")

		r.fake.RateLimit(http.MethodPatch, "/channels/"+dm+"/messages/", 30*time.Second, 1)
		start := time.Now()
		slow := r.fake.DM(u, "for i in 1 2 3 4 5 6; do echo step $i; sleep 1; done; echo progressed")
		r.finished(t, dm, slow.ID)
		require.Less(t, time.Since(start), 25*time.Second, "the turn did not wait for the progress edit's 30 s")
		edits := r.requests(http.MethodPatch, "/channels/"+dm+"/messages/", 0)
		require.NotEmpty(t, edits)
		for _, e := range edits[1:] {
			require.NotEqual(t, http.StatusTooManyRequests, e.Status, "no edit hammered the limit")
		}
		require.Len(t, r.requests(http.MethodPatch, "/channels/"+dm+"/messages/", http.StatusTooManyRequests), 1, "after a 429, progress edits stop until retry_after")
	})

	t.Run("a 5,000-character answer with a code block arrives in messages of at most 2,000 with balanced fences", func(t *testing.T) {
		u := discordfake.Person("1005")
		m := r.fake.DM(u, "echo '```'; for i in $(seq 1 110); do echo \"line $i of a long code block ......................\"; done; echo '```'; echo long-done")
		r.finished(t, m.ChannelID, m.ID)
		var total int
		for _, bm := range r.fake.BotMessages(m.ChannelID)[1:] { // after the progress message
			require.LessOrEqual(t, utf8.RuneCountInString(bm.Content), 2000)
			require.Zero(t, strings.Count(bm.Content, "```")%2, "balanced fences in %q", bm.Content)
			total += utf8.RuneCountInString(bm.Content)
		}
		require.Greater(t, total, 5000)
		require.Contains(t, r.said(m.ChannelID), "long-done")
	})

	t.Run("an oversized artifact is listed, not sent; the answer is delivered", func(t *testing.T) {
		u := discordfake.Person("1006")
		m := r.fake.DM(u, "head -c 5000 /dev/zero > output/display/big.bin && echo big-answer")
		r.finished(t, m.ChannelID, m.ID)
		r.answered(t, m.ChannelID, "big-answer")
		require.Contains(t, r.said(m.ChannelID), "big.bin")
		for _, bm := range r.fake.BotMessages(m.ChannelID) {
			require.Empty(t, bm.Attachments, "nothing over discord.max_file_bytes is uploaded")
		}
	})

	t.Run("20 mentions at once in one thread: one sandbox, 20 answers in order", func(t *testing.T) {
		root := r.fake.Mention("G1", "C6", u1, "hostname > /tmp/host; echo ready")
		r.finished(t, "C6", root.ID)
		var last discordfake.Message
		for i := 1; i <= 20; i++ {
			last = r.fake.MentionIn(root.ID, u1, fmt.Sprintf("echo n%02d-$(cat /tmp/host)", i))
		}
		r.finished(t, root.ID, last.ID)
		var order []string
		hosts := map[string]bool{}
		for _, bm := range r.fake.BotMessages(root.ID) {
			for _, line := range strings.Split(bm.Content, "\n") {
				if len(line) > 4 && line[0] == 'n' && strings.Contains(line, "-") {
					n, host, _ := strings.Cut(line, "-")
					order = append(order, n)
					hosts[host] = true
				}
			}
		}
		want := make([]string, 20)
		for i := range want {
			want[i] = fmt.Sprintf("n%02d", i+1)
		}
		require.Equal(t, want, order, "20 answers, in order")
		require.Len(t, hosts, 1, "one sandbox")
	})
}
