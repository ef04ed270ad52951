package web

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

// recordingHandler remembers the texts it was given.
type recordingHandler struct {
	mu    sync.Mutex
	texts []string
}

func (h *recordingHandler) Handle(_ context.Context, msg bot.Message, _ bot.Replier) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.texts = append(h.texts, msg.Text)
	return nil
}

func textFilesBody(t *testing.T, text string, files map[string]string) (*bytes.Buffer, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	require.NoError(t, mw.WriteField("text", text))
	for name, data := range files {
		fw, err := mw.CreateFormFile("file", name)
		require.NoError(t, err)
		_, _ = fw.Write([]byte(data))
	}
	require.NoError(t, mw.Close())
	return &buf, mw.FormDataContentType()
}

// TestIdempotencyKeyNamesOneMessage: a key sent again with the same message is the same message
// (202, shown once); with a different message it is refused, never answered 202 and then dropped
// as a duplicate.
func TestIdempotencyKeyNamesOneMessage(t *testing.T) {
	const key = "abcdefghijklmnop"
	for _, tc := range []struct {
		name         string
		first, again func(t *testing.T) *http.Request
		code         int
	}{
		{"same text", jsonMsg("one"), jsonMsg("one"), http.StatusAccepted},
		{"other text", jsonMsg("one"), jsonMsg("two"), http.StatusUnprocessableEntity},
		{"same text, added file", jsonMsg("one"), formMsg("one", map[string]string{"a.txt": "x"}), http.StatusUnprocessableEntity},
		{"same files", formMsg("one", map[string]string{"a.txt": "x"}), formMsg("one", map[string]string{"a.txt": "x"}), http.StatusAccepted},
		{"other file", formMsg("one", map[string]string{"a.txt": "x"}), formMsg("one", map[string]string{"b.txt": "x"}), http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &recordingHandler{}
			srv := newTestServerWith(t, Options{TrustLoopback: true})
			srv.handler = h
			r := tc.first(t)
			r.Header.Set("Idempotency-Key", key)
			rec := serve(srv, r)
			require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
			r = tc.again(t)
			r.Header.Set("Idempotency-Key", key)
			rec = serve(srv, r)
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			log, _ := srv.lookup("c1", false).snapshot()
			require.Len(t, log, 1, "one message shown")
		})
	}
}

func jsonMsg(text string) func(t *testing.T) *http.Request {
	return func(t *testing.T) *http.Request {
		return loopbackReq("POST", "/api/conversations/c1/messages", strings.NewReader(`{"text":"`+text+`"}`))
	}
}

func formMsg(text string, files map[string]string) func(t *testing.T) *http.Request {
	return func(t *testing.T) *http.Request {
		body, ctype := textFilesBody(t, text, files)
		r := loopbackReq("POST", "/api/conversations/c1/messages", body)
		r.Header.Set("Content-Type", ctype)
		return r
	}
}

// TestPublishMessageOnceConcurrently: sends of one keyed message at once show it once.
func TestPublishMessageOnceConcurrently(t *testing.T) {
	for range 50 {
		c := newConversation("c", time.Now())
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				<-start
				_, ok := c.publishMessage(Event{Type: EventMessage, EventID: "web-c:k", Text: "x"})
				require.True(t, ok)
			})
		}
		close(start)
		wg.Wait()
		log, _ := c.snapshot()
		require.Len(t, log, 1)
	}
}

// TestMultipartTextMustBeUTF8: the text field of a multipart message is refused (400) when it is
// not UTF-8, as a JSON body's is never: PostgreSQL cannot store it, so the bot would refuse it
// with a 503 "try again", forever.
func TestMultipartTextMustBeUTF8(t *testing.T) {
	for _, tc := range []struct {
		text string
		code int
	}{
		{"héllo \u202e", http.StatusAccepted},
		{"bad \xff\xfe byte", http.StatusBadRequest},
		{"cut \xe2\x82", http.StatusBadRequest},
	} {
		h := &recordingHandler{}
		srv := newTestServerWith(t, Options{TrustLoopback: true})
		srv.handler = h
		rec := serve(srv, formMsg(tc.text, nil)(t))
		require.Equal(t, tc.code, rec.Code, "%q: %s", tc.text, rec.Body.String())
		if tc.code != http.StatusAccepted {
			require.Contains(t, rec.Body.String(), "UTF-8")
			require.Empty(t, h.texts)
		}
	}
}

// filesHandler remembers the files' names it was given.
type filesHandler struct {
	mu    sync.Mutex
	names []string
}

func (h *filesHandler) Handle(_ context.Context, msg bot.Message, _ bot.Replier) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range msg.Files {
		h.names = append(h.names, f.Name)
		f.Discard()
	}
	return nil
}

// TestUploadFileNamesAreCleaned: a file name reaches the bot (and the page) as the sandbox will
// name it: no NUL (PostgreSQL's jsonb refuses \u0000, so the bot could not record the turn and
// answered 503 for ever), no control characters, valid UTF-8, no path.
func TestUploadFileNamesAreCleaned(t *testing.T) {
	for _, tc := range []struct{ disposition, want string }{
		{`filename="note.txt"`, "note.txt"},
		{`filename*=UTF-8''a%00b.txt`, "ab.txt"},
		{`filename*=UTF-8''a%0Ab%1B.txt`, "a b.txt"},
		{`filename*=UTF-8''a%FFb.txt`, "ab.txt"},
		{`filename*=UTF-8''%E2%80%AEfdp.exe`, "fdp.exe"},
		{`filename="..\\..\\x.txt"`, "x.txt"},
		{`filename=".hidden"`, "hidden"},
	} {
		h := &filesHandler{}
		srv := newTestServerWith(t, Options{TrustLoopback: true})
		srv.handler = h
		body := "--B\r\nContent-Disposition: form-data; name=\"file\"; " + tc.disposition + "\r\n\r\ndata\r\n--B--\r\n"
		r := loopbackReq("POST", "/api/conversations/c1/messages", strings.NewReader(body))
		r.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		rec := serve(srv, r)
		require.Equal(t, http.StatusAccepted, rec.Code, "%s: %s", tc.disposition, rec.Body.String())
		require.Equal(t, []string{tc.want}, h.names, tc.disposition)
		log, _ := srv.lookup("c1", false).snapshot()
		require.Equal(t, []FileRef{{Name: tc.want, Size: 4}}, log[0].Files)
	}
}

// TestMultipartOneTextField: a second text field is refused, not silently put in the first one's
// place.
func TestMultipartOneTextField(t *testing.T) {
	h := &recordingHandler{}
	srv := newTestServerWith(t, Options{TrustLoopback: true})
	srv.handler = h
	body, ctype := multipartBody(t, 0, func(mw *multipart.Writer) {
		require.NoError(t, mw.WriteField("text", "rm -rf output/"))
		require.NoError(t, mw.WriteField("text", "echo hi"))
	})
	r := loopbackReq("POST", "/api/conversations/c1/messages", body)
	r.Header.Set("Content-Type", ctype)
	rec := serve(srv, r)
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "one text field")
	require.Empty(t, h.texts)
}

// TestRefusedMessageRegistersNoConversation: a message refused for its body or key leaves no empty
// conversation behind in the list.
func TestRefusedMessageRegistersNoConversation(t *testing.T) {
	for _, tc := range []struct {
		name, ctype, body, key string
		code                   int
	}{
		{"form post", "application/x-www-form-urlencoded", "text=x", "", http.StatusUnsupportedMediaType},
		{"malformed JSON", "application/json", `{"text":`, "", http.StatusBadRequest},
		{"empty text", "application/json", `{"text":" "}`, "", http.StatusBadRequest},
		{"bad key", "application/json", `{"text":"x"}`, "short", http.StatusBadRequest},
	} {
		srv := newTestServerWith(t, Options{TrustLoopback: true})
		r := loopbackReq("POST", "/api/conversations/junk/messages", strings.NewReader(tc.body))
		r.Header.Set("Content-Type", tc.ctype)
		if tc.key != "" {
			r.Header.Set("Idempotency-Key", tc.key)
		}
		rec := serve(srv, r)
		require.Equal(t, tc.code, rec.Code, "%s: %s", tc.name, rec.Body.String())
		require.Nil(t, srv.lookup("junk", false), tc.name)
	}
}

// reusingHandler is the bot after a restart: it finds the event id recorded for another message.
type reusingHandler struct{}

func (reusingHandler) Handle(context.Context, bot.Message, bot.Replier) error {
	return bot.ErrEventReused
}

// TestIdempotencyKeyReusedAfterRestart: once the first message has left this process's memory, the
// bot's record still knows the key: a different message under it gets 422, not 202 and silence.
func TestIdempotencyKeyReusedAfterRestart(t *testing.T) {
	srv := newTestServerWith(t, Options{TrustLoopback: true})
	srv.handler = reusingHandler{}
	r := jsonMsg("two")(t)
	r.Header.Set("Idempotency-Key", "abcdefghijklmnop")
	rec := serve(srv, r)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "Idempotency-Key already names another message")
}
