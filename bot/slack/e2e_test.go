package slack

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db"
)

// workScript prints progress lines over about a second, writes an artifact, reads the user's
// attachment from input/, and ends with a recognisable line.
const workScript = `for i in 1 2 3 4; do echo "step $i"; sleep 0.25; done; ` +
	`mkdir -p output/display && printf 'artifact-bytes-%s' "$(cat input/notes.txt)" > output/display/result.txt; ` +
	`echo "finished with $(wc -c < input/notes.txt) input bytes"`

// TestE2EMentionInThread is the main flow: a signed app_mention in a thread gives 👀, progress
// edits, the answer in the thread, the artifact's bytes shared into the thread, and ✅. Forged and
// stale copies sent first are refused with 401 and start nothing.
func TestE2EMentionInThread(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	root := s.fake.ChannelMessage("C1", "U1", "let's build something")
	notes := s.fake.AddUserFile("U1", "notes.txt", []byte("hello"))
	ev := s.fake.Mention("C1", "U1", workScript, slackfake.InThread(root.TS), slackfake.WithFiles(notes))

	for _, bad := range [][]slackfake.DeliverOption{
		{slackfake.SignWith("wrong-secret")},
		{slackfake.Signature("")},
		{slackfake.SignedAt(time.Now().Add(-6 * time.Minute))},
	} {
		res, err := s.fake.Deliver(t.Context(), s.events, ev, bad...)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, res.Status)
	}
	key := bot.SlackThread("T0FAKE", "C1", root.TS).String()
	_, err := s.store.SessionGet(t.Context(), key)
	require.ErrorIs(t, err, db.ErrNotFound, "a rejected request creates no session")
	require.Zero(t, s.pool.Depth(key), "…and queues no turn")
	require.Empty(t, s.fake.Calls(), "…and makes no Slack call")

	s.deliver(t, ev)
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C1", ev.TS))

	log := s.fake.ReactionLog()
	require.Equal(t, slackfake.ReactionChange{Channel: "C1", TS: ev.TS, Name: bot.ReactSeen}, log[0], "👀 first")
	require.Equal(t, []string{bot.ReactDone}, s.fake.Reactions("C1", ev.TS), "✅ at the end, replacing 👀")

	progress := progressMessages(s.fake, "C1", root.TS)
	require.Len(t, progress, 1, "one progress message")
	require.NotEmpty(t, progress[0].Edits, "edited as the turn went")
	require.True(t, strings.HasPrefix(progress[0].Text, "done in"), progress[0].Text)
	require.Contains(t, strings.Join(progress[0].Edits, "\n"), "step ", "progress showed the output")

	ans := answers(s.fake, "C1", root.TS, regexp.MustCompile(`finished with`))
	require.Equal(t, []string{"step 1\nstep 2\nstep 3\nstep 4\nfinished with 5 input bytes"}, ans,
		"the answer, in the thread; the attachment reached input/")

	files := s.fake.Files("C1")
	require.Len(t, files, 1)
	require.Equal(t, "result.txt", files[0].Name)
	require.Equal(t, []byte("artifact-bytes-hello"), files[0].Data, "the artifact's bytes")
	require.Equal(t, root.TS, files[0].ThreadTS, "shared into the thread")

	sess, err := s.store.SessionGet(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, db.SessionActive, sess.Status)
	require.Len(t, s.sandboxes(t), 1)

	// The admin slash command lists it; a non-admin is refused, and both attempts are audited.
	out := s.slashCommand(t, adminUser, "sessions")
	require.Contains(t, out, key)
	require.Contains(t, out, "active")
	refused := s.slashCommand(t, "U2", "sessions")
	require.Contains(t, refused, "limited to the users listed in admin.users")
	require.NotContains(t, refused, key)
	audit, err := s.store.AuditList(t.Context(), db.AuditQuery{})
	require.NoError(t, err)
	results := map[string]string{}
	for _, a := range audit { // newest first: keep each command's outcome, not its "started"
		if _, seen := results[a.Actor+" "+a.Action]; !seen {
			results[a.Actor+" "+a.Action] = a.Result
		}
	}
	require.Equal(t, "ok", results["slack:UADMIN admin sessions"])
	require.Equal(t, "denied", results["slack:U2 admin sessions"])

	// In-thread commands work through the same mention.
	st := s.fake.Mention("C1", "U1", "status", slackfake.InThread(root.TS))
	s.deliver(t, st)
	waitFake(t, s.fake, "the status reply", func() bool {
		return len(answers(s.fake, "C1", root.TS, regexp.MustCompile(`^Sandbox: active`))) == 1
	})
}

// TestE2ERetriesOneTurn delivers one event three times with Slack's retry headers, the second while
// the first turn is still running: one turn, one answer.
func TestE2ERetriesOneTurn(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ev := s.fake.Mention("C2", "U1", "sleep 1; echo ran-once")
	s.deliver(t, ev)
	waitFake(t, s.fake, "👀", func() bool { return len(s.fake.Reactions("C2", ev.TS)) == 1 })
	s.deliver(t, ev, slackfake.Retry(1, "http_timeout"))
	require.Equal(t, []string{bot.ReactSeen}, s.fake.Reactions("C2", ev.TS), "the retry arrived while the turn ran")
	s.waitDone(t, "C2", ev.TS)
	s.deliver(t, ev, slackfake.Retry(2, "http_timeout"))
	// The same message under a fresh event id (Slack does that too) is still one request.
	s.deliver(t, s.fake.Again(ev, "app_mention"))

	marker := s.fake.Mention("C2", "U1", "echo marker", slackfake.InThread(ev.TS))
	s.deliver(t, marker)
	s.waitDone(t, "C2", marker.TS)
	require.Equal(t, []string{"ran-once"}, answers(s.fake, "C2", ev.TS, regexp.MustCompile(`^ran-once`)), "one answer")
	turns, err := s.store.TurnTranscript(t.Context(), bot.SlackThread("T0FAKE", "C2", ev.TS).String(), db.TranscriptLimit{MaxTurns: 100, MaxChars: 1 << 20})
	require.NoError(t, err)
	require.Len(t, turns, 2, "one turn for the retried event, one for the marker")
}

// TestE2ETwentyMentionsOneThread sends 20 mentions into one thread without waiting for any turn:
// one sandbox, and 20 answers in the order the mentions were sent.
func TestE2ETwentyMentionsOneThread(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	root := s.fake.Mention("C3", "U1", "echo answer-0 && echo 0 >> order.log")
	evs := []slackfake.Event{root}
	for i := 1; i < 20; i++ {
		evs = append(evs, s.fake.Mention("C3", "U1", fmt.Sprintf("echo answer-%d && echo %d >> order.log", i, i), slackfake.InThread(root.TS)))
	}
	for _, ev := range evs {
		s.deliver(t, ev) // each returns at the ack, long before the first turn has a sandbox
	}
	for _, ev := range evs {
		require.Equal(t, bot.ReactDone, s.waitDone(t, "C3", ev.TS))
	}
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("answer-%d", i))
	}
	require.Equal(t, want, answers(s.fake, "C3", root.TS, regexp.MustCompile(`^answer-\d+$`)), "20 answers, in order")
	require.Len(t, s.sandboxes(t), 1, "one sandbox for the thread")
	log := s.fake.Mention("C3", "U1", "tr '\\n' ' ' < order.log", slackfake.InThread(root.TS))
	s.deliver(t, log)
	s.waitDone(t, "C3", log.TS)
	require.Len(t, answers(s.fake, "C3", root.TS, regexp.MustCompile(`^0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19`)), 1,
		"the turns ran one at a time, in order, in the same sandbox")
}

// TestE2EDMs: a DM gets a dm thread key, and two DMs from one user share a sandbox.
func TestE2EDMs(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	first := s.fake.DM("U7", "echo kept > memo.txt && echo dm-one")
	s.deliver(t, first)
	dm := slackfake.DMChannel("U7")
	s.waitDone(t, dm, first.TS)
	second := s.fake.DM("U7", "cat memo.txt")
	s.deliver(t, second)
	s.waitDone(t, dm, second.TS)
	var texts []string
	for _, m := range s.fake.BotMessages(dm) {
		require.Empty(t, m.ThreadTS, "DM answers go top level")
		texts = append(texts, m.Text)
	}
	require.Contains(t, texts, "dm-one")
	require.Contains(t, texts, "kept", "the second DM saw the first one's file: same sandbox")
	sess, err := s.store.SessionGet(t.Context(), "slack:T0FAKE:dm:U7")
	require.NoError(t, err)
	require.EqualValues(t, 1, sess.Generation)
	require.Len(t, s.sandboxes(t), 1)
}

// TestE2EProgressRateLimited: chat.update answers 429 with Retry-After; progress backs off for it,
// the turn is not held up, and the answer is delivered.
func TestE2EProgressRateLimited(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.fake.RateLimit("chat.update", 2, time.Second)
	ev := s.fake.Mention("C4", "U1", `for i in $(seq 1 16); do echo "tick $i"; sleep 0.2; done; echo all-done`)
	s.deliver(t, ev)
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C4", ev.TS))
	require.Len(t, answers(s.fake, "C4", ev.TS, regexp.MustCompile(`all-done$`)), 1, "the answer arrived")

	updates := s.fake.Calls("chat.update")
	limited := 0
	for i, c := range updates {
		if c.Status != http.StatusTooManyRequests {
			continue
		}
		limited++
		if i+1 < len(updates) && i+1 != len(updates)-1 {
			gap := updates[i+1].At.Sub(c.At)
			require.GreaterOrEqual(t, gap, 900*time.Millisecond, "the next edit waited for Retry-After")
		}
	}
	require.Equal(t, 2, limited)
	require.Greater(t, len(updates), 3, "progress resumed after the back-off, before the final update")
	require.Less(t, len(updates), 16, "progress edits are coalesced, not one per line")
}

// TestE2EOversizedArtifact: a file over the Slack upload cap is listed in the thread, not uploaded,
// and the answer and the other files still arrive.
func TestE2EOversizedArtifact(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(o *Options) { o.MaxFileBytes = 1024 })
	ev := s.fake.Mention("C5", "U1", `mkdir -p output/display && head -c 4096 /dev/zero > output/display/big.bin && echo small > output/display/small.txt && echo made-files`)
	s.deliver(t, ev)
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C5", ev.TS))
	require.Len(t, answers(s.fake, "C5", ev.TS, regexp.MustCompile(`^made-files$`)), 1)
	notes := answers(s.fake, "C5", ev.TS, regexp.MustCompile(`not uploaded: big\.bin`))
	require.Len(t, notes, 1)
	require.Contains(t, notes[0], "4 KiB")
	files := s.fake.Files("C5")
	require.Len(t, files, 1)
	require.Equal(t, "small.txt", files[0].Name)
	for _, c := range s.fake.Calls("files.getUploadURLExternal") {
		require.NotEqual(t, "big.bin", c.Params["filename"], "the big file was never offered to Slack")
	}
}

// TestE2ESocketMode runs the main flow and the dedupe over Socket Mode.
func TestE2ESocketMode(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	runSocket(t, s.fake, s.ad)
	ctx := t.Context()
	ev := s.fake.Mention("C6", "U1", `echo over-socket; mkdir -p output/display; printf socket-bytes > output/display/s.txt; sleep 1`)
	ack, err := s.fake.SendSocket(ctx, ev)
	require.NoError(t, err, "acked within 3 s")
	require.Empty(t, ack.Payload)
	waitFake(t, s.fake, "👀", func() bool { return len(s.fake.Reactions("C6", ev.TS)) == 1 })
	_, err = s.fake.SendSocket(ctx, ev, slackfake.SocketRetry(1, "timeout"))
	require.NoError(t, err, "the redelivery is acked too")
	require.Equal(t, bot.ReactDone, s.waitDone(t, "C6", ev.TS))
	_, err = s.fake.SendSocket(ctx, ev, slackfake.SocketRetry(2, "timeout"))
	require.NoError(t, err)

	marker := s.fake.Mention("C6", "U1", "echo marker", slackfake.InThread(ev.TS))
	_, err = s.fake.SendSocket(ctx, marker)
	require.NoError(t, err)
	s.waitDone(t, "C6", marker.TS)
	require.Len(t, answers(s.fake, "C6", ev.TS, regexp.MustCompile(`^over-socket$`)), 1, "one answer")
	require.Len(t, progressMessages(s.fake, "C6", ev.TS), 2, "a progress message per turn")
	files := s.fake.Files("C6")
	require.Len(t, files, 1)
	require.Equal(t, []byte("socket-bytes"), files[0].Data)
	require.Equal(t, ev.TS, files[0].ThreadTS)

	ack, err = s.fake.SendSocketCommand(ctx, slackfake.SlashCommand{Text: "sessions", UserID: adminUser})
	require.NoError(t, err)
	require.Contains(t, string(ack.Payload), bot.SlackThread("T0FAKE", "C6", ev.TS).String())
}
