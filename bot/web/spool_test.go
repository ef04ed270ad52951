package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
)

// refusingHandler takes no message, as the bot does when it cannot record one.
type refusingHandler struct{}

func (refusingHandler) Handle(context.Context, bot.Message, bot.Replier) error {
	return fmt.Errorf("%w: database down", bot.ErrNotAccepted)
}

// multipartBody builds a message with files, then whatever extra adds.
func multipartBody(t *testing.T, files int, extra func(*multipart.Writer)) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i := range files {
		fw, err := mw.CreateFormFile("file", fmt.Sprintf("f%d.txt", i))
		require.NoError(t, err)
		_, err = fw.Write([]byte("some content"))
		require.NoError(t, err)
	}
	if extra != nil {
		extra(mw)
	}
	require.NoError(t, mw.Close())
	return &buf, mw.FormDataContentType()
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), spoolPrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestRefusedUploadLeavesNoSpoolFile: a message refused after some of its files were spooled (a bad
// part after them, too many files, text over the cap, the bot not taking it) leaves nothing on disk;
// otherwise every refused request would leave up to 64 MiB in the temporary directory for good.
func TestRefusedUploadLeavesNoSpoolFile(t *testing.T) {
	tests := []struct {
		name    string
		handler MessageHandler
		files   int
		extra   func(*multipart.Writer)
		want    int
	}{
		{"unknown field after the files", nopHandler{}, 2, func(mw *multipart.Writer) {
			require.NoError(t, mw.WriteField("bogus", "x"))
		}, http.StatusBadRequest},
		{"too many files", nopHandler{}, maxUploadFiles + 1, nil, http.StatusRequestEntityTooLarge},
		{"text over the cap", nopHandler{}, 2, func(mw *multipart.Writer) {
			require.NoError(t, mw.WriteField("text", strings.Repeat("x", DefaultMaxTextBytes+1)))
		}, http.StatusRequestEntityTooLarge},
		{"a file part without a name", nopHandler{}, 1, func(mw *multipart.Writer) {
			fw, err := mw.CreateFormFile("file", "")
			require.NoError(t, err)
			_, _ = fw.Write([]byte("x"))
		}, http.StatusBadRequest},
		{"not taken by the bot", refusingHandler{}, 2, nil, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("TMPDIR", dir)
			srv, err := New(Options{Handler: tt.handler, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })
			body, ctype := multipartBody(t, tt.files, tt.extra)
			r := loopbackReq("POST", "/api/conversations/leak/messages", body)
			r.Header.Set("Content-Type", ctype)
			rec := serve(srv, r)
			require.Equal(t, tt.want, rec.Code, rec.Body.String())
			require.Empty(t, spoolFiles(t, dir))
		})
	}
}

// A turn whose sandbox is recreated midway copies its attachments again, so reading one must not
// remove it; the turn's end discards it, and a reference that is not a spool file's name is refused.
func TestSpooledFileOutlivesReadsUntilDiscarded(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	srv := newTestServer(t, "")
	f, err := srv.spool("notes.txt", []byte("some content"))
	require.NoError(t, err)
	for range 2 {
		rc, err := f.Open(t.Context())
		require.NoError(t, err)
		data, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		require.Equal(t, "some content", string(data))
	}
	require.Len(t, spoolFiles(t, dir), 1)
	srv.DiscardFile("../" + f.Ref)
	srv.DiscardFile("/etc/passwd")
	require.Len(t, spoolFiles(t, dir), 1, "not a spool file's name: nothing removed")
	f.Discard()
	require.Empty(t, spoolFiles(t, dir))
	_, err = f.Open(t.Context())
	require.Error(t, err)
}

// A message the bot could not take is on every open page already (published before it is handed
// over): the pages are told it was not taken, so it does not wait there for an answer.
func TestNotTakenMessageIsMarkedOnThePage(t *testing.T) {
	srv, err := New(Options{Handler: refusingHandler{}, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	r := loopbackReq("POST", "/api/conversations/refused/messages", strings.NewReader(`{"text":"hello"}`))
	r.Header.Set("Content-Type", "application/json")
	rec := serve(srv, r)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	evs, _ := srv.lookup("refused", false).snapshot()
	require.Len(t, evs, 3)
	require.Equal(t, EventMessage, evs[0].Type)
	require.Equal(t, "hello", evs[0].Text)
	require.Equal(t, EventPost, evs[1].Type)
	require.Equal(t, evs[0].EventID, evs[1].ReplyTo)
	require.Equal(t, "Not taken: the bot could not take that message; try again in a minute.", evs[1].Text)
	require.Equal(t, EventReaction, evs[2].Type)
	require.Equal(t, bot.ReactError, evs[2].Reaction)
}

// toggleHandler refuses messages until accept is set, then records them.
type toggleHandler struct {
	mu     sync.Mutex
	accept bool
	got    []bot.Message
}

func (h *toggleHandler) Handle(_ context.Context, m bot.Message, _ bot.Replier) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.accept {
		return fmt.Errorf("%w: the database answered late", bot.ErrNotAccepted)
	}
	h.got = append(h.got, m)
	return nil
}

// A message sent again under its Idempotency-Key after an error is the same message to the bot (the
// same event id, so a turn recorded before the error is not run twice) and shows once on the page.
func TestMessageResentUnderItsKeyIsTheSameMessage(t *testing.T) {
	h := &toggleHandler{}
	srv, err := New(Options{Handler: h, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	post := func(key string) *httptest.ResponseRecorder {
		r := loopbackReq("POST", "/api/conversations/resend/messages", strings.NewReader(`{"text":"hello"}`))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		return serve(srv, r)
	}
	const key = "k1_ABCDEFGHIJKLMNOP"
	require.Equal(t, http.StatusServiceUnavailable, post(key).Code)
	h.mu.Lock()
	h.accept = true
	h.mu.Unlock()
	rec := post(key)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	var acc acceptedJSON
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &acc))
	require.Equal(t, "web-resend:"+key, acc.EventID)
	require.Equal(t, http.StatusAccepted, post("").Code, "without a key: a message of its own")

	h.mu.Lock()
	require.Len(t, h.got, 2)
	require.Equal(t, "web-resend:"+key, h.got[0].EventID)
	require.NotEqual(t, h.got[0].EventID, h.got[1].EventID)
	h.mu.Unlock()
	evs, _ := srv.lookup("resend", false).snapshot()
	var shown int
	for _, ev := range evs {
		if ev.Type == EventMessage && ev.EventID == acc.EventID {
			shown++
		}
	}
	require.Equal(t, 1, shown, "the resent message shows once")

	for _, bad := range []string{"short", strings.Repeat("k", 65), "has:colon-0123456789", "spaces are not ok 0123"} {
		require.Equal(t, http.StatusBadRequest, post(bad).Code, bad)
	}
}

// repeatReader yields n bytes of one pattern without holding them.
type repeatReader struct{ n int64 }

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	r.n -= int64(len(p))
	return len(p), nil
}

// TestUploadIsNotHeldInMemory: an attachment goes from the request to its spool file in small
// pieces. It was read whole into memory first (up to 25 MiB a part, with no bound across requests),
// so parallel uploads could take as much memory as clients cared to send at once.
func TestUploadIsNotHeldInMemory(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	srv := newTestServer(t, "")
	const size = maxUploadFile - 1<<20
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", "big.bin")
		if err == nil {
			_, err = io.Copy(fw, &repeatReader{n: size})
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	r := loopbackReq("POST", "/api/conversations/up/messages", pr)
	r.Header.Set("Content-Type", mw.FormDataContentType())

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := serve(srv, r)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(4<<20), "allocated %s for a %s upload", bot.HumanSize(int64(allocated)), bot.HumanSize(size))
	files := spoolFiles(t, dir)
	require.Len(t, files, 1)
	st, err := os.Stat(filepath.Join(dir, files[0]))
	require.NoError(t, err)
	require.EqualValues(t, size, st.Size())
}
