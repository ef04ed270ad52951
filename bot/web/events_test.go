package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

func TestLogKeepsNewestProgressAndEvicts(t *testing.T) {
	c := newConversation("c", time.Now())
	c.publish(Event{Type: EventMessage, EventID: "m1", Text: "first words"})
	for i := range 5 {
		c.publish(Event{Type: EventProgress, ReplyTo: "m1", Text: fmt.Sprint("step ", i)})
	}
	c.publish(Event{Type: EventPost, ReplyTo: "m1", Text: "answer"})
	log, seq := c.snapshot()
	require.EqualValues(t, 7, seq)
	require.Len(t, log, 3, "one message, the newest progress, the post")
	require.Equal(t, "step 4", log[1].Text)
	require.Equal(t, "first words", c.title)

	// A stream resuming from before the superseded progress still resumes: nothing it needs is gone.
	backlog, ch, ok := c.subscribe(2)
	require.True(t, ok)
	require.Len(t, backlog, 2)
	c.unsubscribe(ch)

	for i := range maxLogEvents + 10 {
		c.publish(Event{Type: EventPost, ReplyTo: "m1", Text: fmt.Sprint(i)})
	}
	log, _ = c.snapshot()
	require.Len(t, log, maxLogEvents)
	_, _, ok = c.subscribe(2)
	require.False(t, ok, "events after 2 were evicted: the client must reload")
	_, ch, ok = c.subscribe(log[0].Seq - 1)
	require.True(t, ok)
	c.unsubscribe(ch)
	_, _, ok = c.subscribe(1 << 40)
	require.False(t, ok, "a cursor from the future (another process) is refused")

	big := strings.Repeat("x", maxLogBytes/4)
	for range 8 {
		c.publish(Event{Type: EventPost, Text: big})
	}
	require.LessOrEqual(t, c.logBytes, maxLogBytes)
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	c := newConversation("c", time.Now())
	_, ch, ok := c.subscribe(0)
	require.True(t, ok)
	for range subBuffer + 1 {
		c.publish(Event{Type: EventPost}) // never blocks, even with nobody reading
	}
	n := 0
	for range ch {
		n++
	}
	require.Equal(t, subBuffer, n, "the channel was closed after the buffer filled")
}

func TestCursor(t *testing.T) {
	s := newTestServer(t, "")
	seq, ok := s.parseCursor(s.cursor(42))
	require.True(t, ok)
	require.EqualValues(t, 42, seq)
	for _, bad := range []string{"other.42", s.epoch + ".x", s.epoch + ".-1", "42"} {
		_, ok := s.parseCursor(bad)
		require.False(t, ok, bad)
	}
}

// TestStreamResetAndClose: a stale cursor gets a reset event; Close ends open streams so that an
// http.Server shutdown is not held up.
func TestStreamResetAndClose(t *testing.T) {
	h := &scriptHandler{}
	srv, err := New(Options{Handler: h, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	defer ts.Close()

	stale := openStream(t, ts.Client(), ts.URL+"/api/conversations/abc/events?after=old.7", nil)
	ev := stale.waitFor("reset", func(Event) bool { return true })
	require.Equal(t, EventReset, ev.Type)

	live := openStream(t, ts.Client(), ts.URL+"/api/conversations/abc/events", nil)
	var acc acceptedJSON
	require.Equal(t, http.StatusAccepted, do(t, ts.Client(), "POST", ts.URL+"/api/conversations/abc/messages",
		jsonBody(t, messageJSON{Text: "hi"}), jsonHdr, &acc))
	live.waitFor("the reply", func(e Event) bool { return e.Type == EventPost && e.ReplyTo == acc.EventID && e.Text == "echo: hi" })
	up := live.waitFor("the upload", func(e Event) bool { return e.Type == EventUpload })
	require.True(t, up.File.Image)

	require.NoError(t, srv.Close())
	for range live.ch { // drained and closed: the server ended the stream
	}
	var e errorJSON
	require.Equal(t, http.StatusServiceUnavailable, do(t, ts.Client(), "POST", ts.URL+"/api/conversations/abc/messages",
		jsonBody(t, messageJSON{Text: "late"}), jsonHdr, &e))
	require.Contains(t, e.Error, "shutting down")
}

// scriptHandler answers each message with a post and a small PNG upload, in order.
type scriptHandler struct {
	mu   sync.Mutex
	seen []string
}

func (h *scriptHandler) Handle(ctx context.Context, msg bot.Message, r bot.Replier) error {
	h.mu.Lock()
	h.seen = append(h.seen, msg.Text)
	h.mu.Unlock()
	if err := r.Post(ctx, "echo: "+msg.Text); err != nil {
		return err
	}
	_, err := r.Upload(ctx, "dot.png", pngBytes)
	return err
}

// pngBytes is a 1×1 PNG.
var pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" +
	"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

// TestMessagesHandledInOrder: intake runs off the request but keeps each conversation's order.
func TestMessagesHandledInOrder(t *testing.T) {
	h := &scriptHandler{}
	srv, err := New(Options{Handler: h, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	es := openStream(t, ts.Client(), ts.URL+"/api/conversations/order/events", nil)
	var want []string
	for i := range 20 {
		text := fmt.Sprint("m", i)
		want = append(want, text)
		require.Equal(t, http.StatusAccepted, do(t, ts.Client(), "POST", ts.URL+"/api/conversations/order/messages",
			jsonBody(t, messageJSON{Text: text}), jsonHdr, nil))
	}
	es.waitFor("the last reply", func(e Event) bool { return e.Type == EventPost && e.Text == "echo: m19" })
	require.NoError(t, srv.Close())
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, want, h.seen)
}

func TestFileStore(t *testing.T) {
	f := newFileStore(100)
	now := time.Now()
	a, err := f.put("c", "a.bin", bytes.Repeat([]byte{1}, 60), now)
	require.NoError(t, err)
	b, err := f.put("c", "b.bin", bytes.Repeat([]byte{2}, 60), now)
	require.NoError(t, err)
	require.Nil(t, f.get(a.ID), "the oldest file made room")
	require.NotNil(t, f.get(b.ID))
	_, err = f.put("c", "huge.bin", make([]byte, 101), now)
	require.Error(t, err)

	for name, want := range map[string][2]any{
		"x.png":  {"image/png", true},
		"x.PNG":  {"image/png", true},
		"x.txt":  {"text/plain; charset=utf-8", false},
		"x.svg":  {"application/octet-stream", false},
		"x.html": {"application/octet-stream", false},
	} {
		data := []byte("<html><script>alert(1)</script>")
		if strings.HasSuffix(strings.ToLower(name), ".png") {
			data = pngBytes
		}
		ct, img := contentType(name, data)
		require.Equal(t, want[0], ct, name)
		require.Equal(t, want[1], img, name)
	}
	ct, img := contentType("fake.png", []byte("<html><script>alert(1)</script>"))
	require.Equal(t, "application/octet-stream", ct, "HTML named .png is not an image")
	require.False(t, img)
}

func TestServeFileHeaders(t *testing.T) {
	srv := newTestServer(t, "")
	img, err := srv.files.put("c", "dot.png", pngBytes, time.Now())
	require.NoError(t, err)
	page, err := srv.files.put("c", "report \"final\".html", []byte("<script>alert(1)</script>"), time.Now())
	require.NoError(t, err)

	rec := serve(srv, loopbackReq("GET", img.URL, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "image/png", rec.Header().Get("Content-Type"))
	require.Equal(t, `inline; filename=dot.png`, rec.Header().Get("Content-Disposition"))
	require.Equal(t, pngBytes, rec.Body.Bytes())

	rec = serve(srv, loopbackReq("GET", page.URL, nil))
	require.Equal(t, "application/octet-stream", rec.Header().Get("Content-Type"))
	require.True(t, strings.HasPrefix(rec.Header().Get("Content-Disposition"), "attachment;"))
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "sandbox")
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
}
