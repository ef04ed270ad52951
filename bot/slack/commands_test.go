package slack

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
)

// countingAdmin counts the admin commands that ran.
type countingAdmin struct {
	mu  sync.Mutex
	ran []string
}

func (c *countingAdmin) Run(_ context.Context, actor string, argv []string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ran = append(c.ran, actor+" "+strings.Join(argv, " "))
	return "done", nil
}

func (c *countingAdmin) runs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ran...)
}

func TestSlashCommandReplayIsIgnored(t *testing.T) {
	adm := &countingAdmin{}
	hs := newHarness(t, nil, newStubHandler(), func(o *Options) { o.Admin = adm })
	body := hs.fake.SlashCommandBody(slackfake.SlashCommand{Text: "drain", UserID: "UADMIN"})
	at := time.Now()
	for _, tc := range []struct {
		name     string
		signedAt time.Time
		upper    bool
		want     string
		runs     int
	}{
		{name: "first delivery runs", signedAt: at, want: "done", runs: 1},
		{name: "the same signature again is a replay", signedAt: at, want: "already received", runs: 1},
		{name: "and stays one later in the window", signedAt: at, want: "already received", runs: 1},
		// hex decodes either case, so the same signature spelled in upper case verifies: it is still
		// the captured request, and must not run the command again.
		{name: "the same signature in upper-case hex is a replay", signedAt: at, upper: true, want: "already received", runs: 1},
		{name: "a new signature is a new request", signedAt: at.Add(time.Second), want: "done", runs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []slackfake.DeliverOption{slackfake.SignedAt(tc.signedAt)}
			if tc.upper {
				sig := slackfake.Sign(hs.fake.Options().SigningSecret, tc.signedAt.Unix(), body)
				opts = append(opts, slackfake.Signature("v0="+strings.ToUpper(strings.TrimPrefix(sig, "v0="))))
			}
			res, err := hs.fake.PostSigned(t.Context(), hs.commands, "application/x-www-form-urlencoded", body, opts...)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, res.Status)
			var reply ephemeral
			require.NoError(t, json.Unmarshal(res.Body, &reply))
			require.Equal(t, "ephemeral", reply.ResponseType)
			require.Contains(t, reply.Text, tc.want)
			require.Len(t, adm.runs(), tc.runs)
		})
	}
}

// TestInThreadAdminRepliesAreEphemeral: "@threadbox admin …" in a thread is answered with
// chat.postEphemeral to the asker only, refusals included; nothing lands in the shared thread.
func TestInThreadAdminRepliesAreEphemeral(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	admin := bot.NewAdmin(st, nil, []string{"slack:UADMIN"}, nil)
	handler := bot.NewHandler(bot.HandlerConfig{}, nil, st, admin, nil)
	hs := newHarness(t, nil, handler)
	for _, tc := range []struct{ name, user, want string }{
		{"admin", "UADMIN", "admin commands:"},
		{"not an admin", "U2", "limited to the users listed in admin.users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := hs.fake.Mention("C1", tc.user, "hello")
			hs.deliver(t, hs.fake.Mention("C1", tc.user, "admin help", slackfake.InThread(root.TS)))
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()
			var got []slackfake.Ephemeral
			require.NoError(t, hs.fake.Wait(ctx, func() bool {
				got = nil
				for _, e := range hs.fake.Ephemerals("C1") {
					if e.ThreadTS == root.TS {
						got = append(got, e)
					}
				}
				return len(got) > 0
			}))
			require.Len(t, got, 1)
			require.Equal(t, tc.user, got[0].User, "only the asker sees it")
			require.Contains(t, got[0].Text, tc.want)
			for _, m := range hs.fake.Replies("C1", root.TS) {
				require.Empty(t, m.BotID, "nothing from the bot in the shared thread: %q", m.Text)
			}
		})
	}
}

// A command's reply must fit Socket Mode's 20 KB response whatever the output is made of: the cap is
// on the bytes the reply takes as JSON, not on characters (a CJK character is 3 bytes, an emoji 4, a
// control character 6 escaped).
func TestCommandOutputFitsSocketModeResponse(t *testing.T) {
	for name, unit := range map[string]string{
		"ascii": "a", "ampersands": "&", "cjk": "界", "emoji": "🙂", "control": "\x01", "line separator": "\u2028",
		"lines": "row\n", "quotes": `"\`,
	} {
		t.Run(name, func(t *testing.T) {
			out := formatCommandOutput(strings.Repeat(unit, 30000))
			require.True(t, utf8.ValidString(out))
			b, err := json.Marshal(ephemeral{ResponseType: "ephemeral", Text: out})
			require.NoError(t, err)
			require.LessOrEqual(t, len(b), 20*1000, "%d bytes", len(b))
			require.Contains(t, out, "(cut;")
		})
	}
	require.Equal(t, "short &amp; plain", formatCommandOutput("short & plain\n"))
}

// gatedAdmin runs a command only once released.
type gatedAdmin struct{ started, release chan struct{} }

func (g gatedAdmin) Run(context.Context, string, []string) (string, error) {
	close(g.started)
	<-g.release
	return "late result", nil
}

// A command told "Working on it…" has promised its result: if the adapter starts closing between
// the budget running out and the hand-over to the response_url, the result is still posted.
func TestSlashCommandResultPostedWhenClosingAfterBudget(t *testing.T) {
	g := gatedAdmin{started: make(chan struct{}), release: make(chan struct{})}
	hs := newHarness(t, nil, newStubHandler(), func(o *Options) { o.Admin = g; o.CommandBudget = time.Hour })
	ctx, cancel := context.WithCancel(t.Context())
	reply := make(chan string, 1)
	go func() {
		reply <- hs.ad.runCommand(ctx, slack.SlashCommand{UserID: "U1", ChannelID: "C1", Text: "sessions",
			ResponseURL: strings.TrimSuffix(hs.fake.APIURL(), "/api/") + "/commands/late"})
	}()
	<-g.started
	hs.ad.queue.close() // Close has begun: no new background work
	cancel()            // the request ends before the command does
	require.Equal(t, "Working on it…", <-reply)
	close(g.release)
	waitFake(t, hs.fake, "the late result", func() bool { return len(hs.fake.ResponsePosts()) == 1 })
	require.Contains(t, string(hs.fake.ResponsePosts()[0].Body), "late result")
}
