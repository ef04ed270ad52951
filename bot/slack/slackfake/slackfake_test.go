package slackfake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

func newFake(t *testing.T, opts slackfake.Options) (*slackfake.Server, *slack.Client) {
	t.Helper()
	f := slackfake.New(opts)
	t.Cleanup(f.Close)
	return f, slack.New(f.Options().BotToken, slack.OptionAPIURL(f.APIURL()), slack.OptionAppLevelToken(f.Options().AppToken))
}

func slackErr(t *testing.T, err error) string {
	t.Helper()
	var se slack.SlackErrorResponse
	require.True(t, errors.As(err, &se), "want a Slack error, got %v", err)
	return se.Err
}

// TestWebAPIWithSlackGo drives the fake with slack-go itself, so the fake speaks what the SDK expects.
func TestWebAPIWithSlackGo(t *testing.T) {
	f, api := newFake(t, slackfake.Options{})
	ctx := t.Context()

	who, err := api.AuthTestContext(ctx)
	require.NoError(t, err)
	require.Equal(t, "U0BOT", who.UserID)
	require.Equal(t, "B0BOT", who.BotID)
	require.Equal(t, "T0FAKE", who.TeamID)

	root := f.Mention("C1", "U1", "hi")
	_, ts, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("answer", false), slack.MsgOptionTS(root.TS))
	require.NoError(t, err)
	_, _, _, err = api.UpdateMessageContext(ctx, "C1", ts, slack.MsgOptionText("answer, edited", false))
	require.NoError(t, err)
	_, _, _, err = api.UpdateMessageContext(ctx, "C1", "1.2", slack.MsgOptionText("x", false))
	require.Equal(t, "message_not_found", slackErr(t, err))
	_, _, _, err = api.UpdateMessageContext(ctx, "C1", root.TS, slack.MsgOptionText("x", false))
	require.Equal(t, "cant_update_message", slackErr(t, err), "the bot cannot edit a user's message")
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText(strings.Repeat("x", 40001), false))
	require.Equal(t, "msg_too_long", slackErr(t, err))

	require.NoError(t, api.AddReactionContext(ctx, "eyes", slack.NewRefToMessage("C1", root.TS)))
	require.Equal(t, "already_reacted", slackErr(t, api.AddReactionContext(ctx, "eyes", slack.NewRefToMessage("C1", root.TS))))
	require.NoError(t, api.RemoveReactionContext(ctx, "eyes", slack.NewRefToMessage("C1", root.TS)))
	require.Equal(t, "no_reaction", slackErr(t, api.RemoveReactionContext(ctx, "eyes", slack.NewRefToMessage("C1", root.TS))))

	msgs, _, _, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: "C1", Timestamp: root.TS})
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, "answer, edited", msgs[1].Text)

	f.AddUser("U1", "ada")
	u, err := api.GetUserInfoContext(ctx, "U1")
	require.NoError(t, err)
	require.Equal(t, "ada", u.Name)
	_, err = api.GetUserInfoContext(ctx, "U404")
	require.Equal(t, "user_not_found", slackErr(t, err))

	reply := f.Replies("C1", root.TS)
	require.Len(t, reply, 1)
	require.Equal(t, []string{"answer"}, reply[0].Edits)
	require.Equal(t, []slackfake.ReactionChange{{Channel: "C1", TS: root.TS, Name: "eyes"}, {Channel: "C1", TS: root.TS, Name: "eyes", Removed: true}}, f.ReactionLog())
}

func TestTokensAndFaults(t *testing.T) {
	f, api := newFake(t, slackfake.Options{})
	ctx := t.Context()
	bad := slack.New("xoxb-nope", slack.OptionAPIURL(f.APIURL()))
	_, err := bad.AuthTestContext(ctx)
	require.Equal(t, "invalid_auth", slackErr(t, err))
	appAsBot := slack.New(f.Options().AppToken, slack.OptionAPIURL(f.APIURL()))
	_, err = appAsBot.AuthTestContext(ctx)
	require.Equal(t, "not_allowed_token_type", slackErr(t, err))
	botAsApp := slack.New(f.Options().BotToken, slack.OptionAPIURL(f.APIURL()), slack.OptionAppLevelToken(f.Options().BotToken))
	_, _, err = botAsApp.StartSocketModeContext(ctx)
	require.Equal(t, "not_allowed_token_type", slackErr(t, err))

	f.RateLimit("chat.postMessage", 1, 3*time.Second)
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false))
	var rl *slack.RateLimitedError
	require.ErrorAs(t, err, &rl)
	require.Equal(t, 3*time.Second, rl.RetryAfter)
	f.Fail("chat.postMessage", 1, "channel_not_found")
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("x", false))
	require.Equal(t, "channel_not_found", slackErr(t, err))
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("third time lucky", false))
	require.NoError(t, err)

	calls := f.Calls("chat.postMessage")
	require.Len(t, calls, 3)
	require.Equal(t, http.StatusTooManyRequests, calls[0].Status)
	require.Equal(t, "ratelimited", calls[0].Error)
	require.Equal(t, "channel_not_found", calls[1].Error)
	require.Equal(t, "third time lucky", calls[2].Params["text"])
	require.Equal(t, f.Options().BotToken, calls[2].Token)

	resp, err := http.Post(f.APIURL()+"files.upload", "application/x-www-form-urlencoded", strings.NewReader("token="+f.Options().BotToken))
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	require.Equal(t, map[string]any{"ok": false, "error": "unknown_method"}, body, "files.upload is retired")
}

func TestFilesWithSlackGo(t *testing.T) {
	f, api := newFake(t, slackfake.Options{})
	ctx := t.Context()
	root := f.Mention("C1", "U1", "make a file")
	sum, err := api.UploadFileContext(ctx, slack.UploadFileParameters{
		Filename: "out.txt", Title: "out.txt", FileSize: 5, Reader: bytes.NewReader([]byte("hello")),
		Channel: "C1", ThreadTimestamp: root.TS,
	})
	require.NoError(t, err, "slack-go trusts the upload URL because it is on the API host")
	files := f.Files("C1")
	require.Len(t, files, 1)
	require.Equal(t, sum.ID, files[0].ID)
	require.Equal(t, []byte("hello"), files[0].Data)
	require.Equal(t, root.TS, files[0].ThreadTS)

	_, err = api.UploadFileContext(ctx, slack.UploadFileParameters{
		Filename: "liar.txt", FileSize: 10, Reader: bytes.NewReader([]byte("short")), Channel: "C1",
	})
	require.ErrorContains(t, err, "UploadToURL", "a wrong FileSize fails like Slack's S3 step")

	uf := f.AddUserFile("U1", "notes.md", []byte("# notes"))
	var got bytes.Buffer
	require.NoError(t, api.GetFileContext(ctx, uf.URLPrivateDownload, &got))
	require.Equal(t, "# notes", got.String())
	stranger := slack.New("xoxb-someone-else", slack.OptionAPIURL(f.APIURL()))
	err = stranger.GetFileContext(ctx, uf.URLPrivate, &got)
	require.ErrorContains(t, err, "sign-in page", "no token: redirected to sign-in, as files.slack.com does")
}

func TestSocketModeWire(t *testing.T) {
	f, api := newFake(t, slackfake.Options{AckTimeout: 200 * time.Millisecond, PingInterval: 20 * time.Millisecond})
	ctx := t.Context()
	_, url, err := api.StartSocketModeContext(ctx)
	require.NoError(t, err)
	hdr := http.Header{"Origin": {"https://api.slack.com"}}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, url, hdr)
	require.NoError(t, err)
	defer conn.Close()
	pinged := make(chan struct{}, 1)
	conn.SetPingHandler(func(string) error {
		select {
		case pinged <- struct{}{}:
		default:
		}
		return nil
	})
	// A lost frame fails the test instead of hanging it.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	var hello map[string]any
	require.NoError(t, conn.ReadJSON(&hello))
	require.Equal(t, "hello", hello["type"])
	_, _, err = websocket.DefaultDialer.DialContext(ctx, url, hdr)
	require.Error(t, err, "a connection URL is single use")

	ev := f.Mention("C1", "U1", "hi")
	type result struct {
		ack slackfake.Ack
		err error
	}
	res := make(chan result, 1)
	go func() {
		a, err := f.SendSocket(context.Background(), ev)
		res <- result{a, err}
	}()
	var env struct {
		EnvelopeID string          `json:"envelope_id"`
		Type       string          `json:"type"`
		Payload    json.RawMessage `json:"payload"`
	}
	require.NoError(t, conn.ReadJSON(&env))
	require.Equal(t, "events_api", env.Type)
	require.JSONEq(t, string(ev.Body), string(env.Payload))
	r := <-res
	require.ErrorIs(t, r.err, slackfake.ErrNoAck, "an envelope nobody acknowledges is reported")

	go func() {
		a, err := f.SendSocket(context.Background(), ev, slackfake.SocketRetry(1, "timeout"))
		res <- result{a, err}
	}()
	require.NoError(t, conn.ReadJSON(&env))
	require.NoError(t, conn.WriteJSON(map[string]any{"envelope_id": env.EnvelopeID}))
	r = <-res
	require.NoError(t, r.err)
	require.Equal(t, env.EnvelopeID, r.ack.EnvelopeID)
	// Reading drives the ping handler.
	go func() {
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	select {
	case <-pinged:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never pinged")
	}
}

// TestPostEphemeralWithSlackGo: chat.postEphemeral as slack-go sends it (channel, user, thread_ts,
// text) and reads it back (message_ts); the message stays out of the conversation.
func TestPostEphemeralWithSlackGo(t *testing.T) {
	f, api := newFake(t, slackfake.Options{})
	ctx := t.Context()
	root := f.Mention("C1", "U1", "hi")

	ts, err := api.PostEphemeralContext(ctx, "C1", "U1", slack.MsgOptionText("only for you", false), slack.MsgOptionTS(root.TS))
	require.NoError(t, err)
	require.NotEmpty(t, ts, "message_ts comes back")
	require.Equal(t, []slackfake.Ephemeral{{Channel: "C1", User: "U1", ThreadTS: root.TS, Text: "only for you", MessageTS: ts}},
		f.Ephemerals("C1"))
	require.Empty(t, f.Replies("C1", root.TS), "an ephemeral message is not in the thread")
	require.Empty(t, f.BotMessages("C1"))
	_, _, _, err = api.UpdateMessageContext(ctx, "C1", ts, slack.MsgOptionText("x", false))
	require.Equal(t, "message_not_found", slackErr(t, err), "nor can it be edited as a message")

	for _, tc := range []struct {
		name, channel, user, text, thread, want string
	}{
		{"no user", "C1", "", "x", "", "user_not_found"},
		{"no channel", "", "U1", "x", "", "channel_not_found"},
		{"no text", "C1", "U1", "", "", "no_text"},
		{"too long", "C1", "U1", strings.Repeat("x", 40001), "", "msg_too_long"},
		{"unknown thread", "C1", "U1", "x", "1.2", "thread_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []slack.MsgOption{slack.MsgOptionText(tc.text, false)}
			if tc.thread != "" {
				opts = append(opts, slack.MsgOptionTS(tc.thread))
			}
			_, err := api.PostEphemeralContext(ctx, tc.channel, tc.user, opts...)
			require.Equal(t, tc.want, slackErr(t, err))
		})
	}
	calls := f.Calls("chat.postEphemeral")
	require.Equal(t, "U1", calls[0].Params["user"], "the wire format: user is a parameter")
	require.Equal(t, root.TS, calls[0].Params["thread_ts"])
}

// TestHold: a held call waits, unanswered and unrecorded; one whose caller goes away is dropped;
// after the n held calls the others are answered at once; a released one is answered and recorded.
func TestHold(t *testing.T) {
	f, api := newFake(t, slackfake.Options{})
	h := f.Hold("chat.postMessage", 1)

	gone, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, _, err := api.PostMessageContext(gone, "C1", slack.MsgOptionText("never", false))
		errc <- err
	}()
	<-h.Waiting()
	cancel()
	require.Error(t, <-errc, "the caller went away")
	<-h.Gone()
	_, _, err := api.PostMessageContext(t.Context(), "C1", slack.MsgOptionText("later", false))
	require.NoError(t, err, "past the held call, answered at once")
	calls := f.Calls("chat.postMessage")
	require.Len(t, calls, 1, "the dropped call is not recorded")
	require.Equal(t, "later", calls[0].Params["text"])

	h2 := f.Hold("chat.postMessage", 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := api.PostMessageContext(t.Context(), "C1", slack.MsgOptionText("released", false))
		done <- err
	}()
	<-h2.Waiting()
	h2.Release()
	require.NoError(t, <-done)
	require.Len(t, f.Calls("chat.postMessage"), 2)
}
