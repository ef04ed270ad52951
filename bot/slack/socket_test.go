package slack

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// runSocket starts RunSocketMode against the fake and waits for the connection.
func runSocket(t *testing.T, fake *slackfake.Server, ad *Adapter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ad.RunSocketMode(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	ctx2, cancel2 := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel2()
	require.NoError(t, fake.WaitConnected(ctx2))
}

func TestSocketModeEventsAckedAndDeduped(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h)
	runSocket(t, hs.fake, hs.ad)
	ctx := t.Context()

	ev := hs.fake.Mention("C1", "U1", "echo socket")
	ack, err := hs.fake.SendSocket(ctx, ev)
	require.NoError(t, err, "acknowledged within Slack's 3 s")
	require.Empty(t, ack.Payload)
	require.Equal(t, "echo socket", h.next(t).Text)
	// Slack redelivers an envelope it thinks was lost, and may deliver one event over two connections.
	_, err = hs.fake.SendSocket(ctx, ev, slackfake.SocketRetry(1, "timeout"))
	require.NoError(t, err, "a duplicate is acknowledged too, or Slack keeps sending it")
	_, err = hs.fake.Deliver(ctx, hs.events, ev, slackfake.Retry(2, "http_timeout"))
	require.NoError(t, err)

	// slackevents rejects an event whose block it cannot read; the adapter still acks it and answers
	// the mention.
	odd := hs.fake.Callback(map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> odd block", "ts": "5.000001",
		"channel": "C1", "blocks": []any{map[string]any{"type": "rich_text", "elements": 7}}})
	_, err = hs.fake.SendSocket(ctx, odd)
	require.NoError(t, err)
	require.Equal(t, "odd block", h.next(t).Text)

	// A frame that is not an envelope at all is survived; the connection keeps working.
	require.NoError(t, hs.fake.SendSocketRaw(ctx, json.RawMessage(`{"type":"events_api","envelope_id":"bad-1","payload":"nope"}`)))
	waitFake(t, hs.fake, "the malformed envelope's ack", func() bool {
		for _, a := range hs.fake.Acks() {
			if a.EnvelopeID == "bad-1" {
				return true
			}
		}
		return false
	})
	next := hs.fake.Mention("C1", "U1", "still here", slackfake.InThread(ev.TS))
	_, err = hs.fake.SendSocket(ctx, next)
	require.NoError(t, err)
	require.Equal(t, "still here", h.next(t).Text)
	hs.drain(t)
	require.Len(t, h.messages(), 3)
}

func TestSocketModeReconnects(t *testing.T) {
	h := newStubHandler()
	hs := newHarness(t, nil, h)
	runSocket(t, hs.fake, hs.ad)
	require.NoError(t, hs.fake.Disconnect("refresh_requested"))
	// The client opens a new connection (a fresh apps.connections.open: URLs are single use).
	waitFake(t, hs.fake, "a new connection, and the old one gone", func() bool {
		return hs.fake.Opened() == 2 && hs.fake.Connected() == 1
	})
	require.Len(t, hs.fake.Calls("apps.connections.open"), 2)
	_, err := hs.fake.SendSocket(t.Context(), hs.fake.Mention("C1", "U1", "after reconnect"))
	require.NoError(t, err)
	require.Equal(t, "after reconnect", h.next(t).Text)
	for _, c := range hs.fake.Calls("apps.connections.open") {
		require.Equal(t, hs.fake.Options().AppToken, c.Token, "Socket Mode uses the app-level token")
	}
}

func TestSocketModeNeedsAppToken(t *testing.T) {
	ad, err := New(Options{BotToken: "x", Handler: newStubHandler(), Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ad.Close() })
	require.ErrorContains(t, ad.RunSocketMode(t.Context()), "slack.app_token")
}

func TestSocketModeBadAppToken(t *testing.T) {
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	ad, err := New(Options{BotToken: fake.Options().BotToken, AppToken: "xapp-wrong", APIURL: fake.APIURL(),
		Handler: newStubHandler(), Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ad.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	err = ad.RunSocketMode(ctx)
	require.ErrorContains(t, err, "invalid_auth", "a refused token ends the loop instead of retrying forever")
}

// stubAdmin answers admin commands like bot.Admin does for an allowlist.
type stubAdmin struct {
	admins map[string]bool
	delay  chan struct{}
}

func (a stubAdmin) Run(ctx context.Context, actor string, argv []string) (string, error) {
	if a.delay != nil {
		<-a.delay
	}
	if !a.admins[actor] {
		return "Sorry: refused.", context.Canceled
	}
	return "ran " + strings.Join(argv, " ") + " for " + actor + "\nsecond <line>", nil
}

func TestSlashCommands(t *testing.T) {
	slow := make(chan struct{})
	hs := newHarness(t, nil, newStubHandler(), func(o *Options) {
		o.Admin = stubAdmin{admins: map[string]bool{"slack:UADMIN": true}}
	})
	runSocket(t, hs.fake, hs.ad)
	ctx := t.Context()
	res, err := hs.fake.SlashCommand(ctx, hs.commands, slackfake.SlashCommand{Text: "admin sessions --status active", UserID: "UADMIN"})
	require.NoError(t, err)
	var reply ephemeral
	require.NoError(t, json.Unmarshal(res.Body, &reply))
	require.Equal(t, "ephemeral", reply.ResponseType)
	require.Equal(t, "```\nran sessions --status active for slack:UADMIN\nsecond &lt;line&gt;\n```", reply.Text)

	res, err = hs.fake.SlashCommand(ctx, hs.commands, slackfake.SlashCommand{Text: "sessions", UserID: "U2"})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(res.Body, &reply))
	require.Equal(t, "Sorry: refused.", reply.Text)

	ack, err := hs.fake.SendSocketCommand(ctx, slackfake.SlashCommand{Text: "stats", UserID: "UADMIN"})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(ack.Payload, &reply))
	require.Contains(t, reply.Text, "ran stats for slack:UADMIN", "over Socket Mode the ack carries the reply")

	// A command slower than the budget answers at once and posts the result to response_url.
	slowHS := newHarness(t, hs.fake, newStubHandler(), func(o *Options) {
		o.Admin = stubAdmin{admins: map[string]bool{"slack:UADMIN": true}, delay: slow}
		o.CommandBudget = time.Millisecond
	})
	res, err = hs.fake.SlashCommand(ctx, slowHS.commands, slackfake.SlashCommand{Text: "drain", UserID: "UADMIN"})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(res.Body, &reply))
	require.Equal(t, "Working on it…", reply.Text)
	close(slow)
	waitFake(t, hs.fake, "the late result", func() bool { return len(hs.fake.ResponsePosts()) == 1 })
	var late map[string]any
	require.NoError(t, json.Unmarshal(hs.fake.ResponsePosts()[0].Body, &late))
	require.Equal(t, "ephemeral", late["response_type"])
	require.Contains(t, late["text"], "ran drain for slack:UADMIN")
}
