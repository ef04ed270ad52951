package slack

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
)

// waitTimeout bounds every wait on the fake; the e2e flows create Docker sandboxes.
const waitTimeout = 60 * time.Second

// stubHandler records messages and answers through the replier like a minimal bot.Handler would.
type stubHandler struct {
	mu   sync.Mutex
	msgs []bot.Message
	got  chan bot.Message
	// handleFunc replaces the default behaviour (post "ok: <text>").
	handleFunc func(ctx context.Context, msg bot.Message, r bot.Replier) error
}

func newStubHandler() *stubHandler { return &stubHandler{got: make(chan bot.Message, 10000)} }

func (h *stubHandler) Handle(ctx context.Context, msg bot.Message, r bot.Replier) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, msg)
	f := h.handleFunc
	h.mu.Unlock()
	h.got <- msg
	if f != nil {
		return f(ctx, msg, r)
	}
	return nil
}

func (h *stubHandler) messages() []bot.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bot.Message(nil), h.msgs...)
}

// next waits for the next handled message.
func (h *stubHandler) next(t *testing.T) bot.Message {
	t.Helper()
	select {
	case m := <-h.got:
		return m
	case <-time.After(waitTimeout):
		t.Fatal("no message reached the handler")
		return bot.Message{}
	}
}

// harness is an adapter served over HTTP against a fake Slack.
type harness struct {
	fake     *slackfake.Server
	ad       *Adapter
	srv      *httptest.Server
	events   string
	commands string
}

func newHarness(t *testing.T, fake *slackfake.Server, h Handler, mod ...func(*Options)) *harness {
	t.Helper()
	if fake == nil {
		fake = slackfake.New(slackfake.Options{})
		t.Cleanup(fake.Close)
	}
	o := fake.Options()
	opts := Options{
		BotToken: o.BotToken, SigningSecret: o.SigningSecret, AppToken: o.AppToken, APIURL: fake.APIURL(),
		Handler: h, Logger: zaptest.NewLogger(t),
	}
	for _, m := range mod {
		m(&opts)
	}
	ad, err := New(opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/slack/events", ad.EventsHandler())
	mux.Handle("/slack/commands", ad.CommandsHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, ad.Close())
	})
	return &harness{fake: fake, ad: ad, srv: srv, events: srv.URL + "/slack/events", commands: srv.URL + "/slack/commands"}
}

// deliver sends ev over HTTP and requires a 200.
func (h *harness) deliver(t *testing.T, ev slackfake.Event, opts ...slackfake.DeliverOption) slackfake.Result {
	t.Helper()
	res, err := h.fake.Deliver(t.Context(), h.events, ev, opts...)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	return res
}

// drain waits until every accepted event has been handled.
func (h *harness) drain(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, h.ad.queue.wait(ctx))
}

// readFile reads an attachment the way a turn does.
func readFile(t *testing.T, f bot.File) []byte {
	t.Helper()
	rc, err := f.Open(t.Context())
	require.NoError(t, err)
	defer rc.Close()
	data, err := io.ReadAll(rc)
	require.NoError(t, err)
	return data
}

// waitFake waits until cond holds on the fake, failing with what after waitTimeout.
func waitFake(t *testing.T, fake *slackfake.Server, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := fake.Wait(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// windowStart is a fake clock's start: the beginning of the current minute (so rate-limit windows
// are deterministic) and close enough to the wall clock for the fake's signatures to verify.
func windowStart() time.Time { return time.Now().Truncate(time.Minute).Add(time.Second) }
