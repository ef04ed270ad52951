package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/db"
)

// fixedDirectory is a directory store holding one web session and its turns.
type fixedDirectory struct {
	sess  db.Session
	turns []db.Turn
}

var _ bot.DirectoryStore = fixedDirectory{}

func (f fixedDirectory) SessionGet(_ context.Context, key string) (db.Session, error) {
	if key != f.sess.ThreadKey {
		return db.Session{}, db.ErrNotFound
	}
	return f.sess, nil
}

func (f fixedDirectory) SessionsByStatus(_ context.Context, st db.SessionStatus, after string, _ int) ([]db.Session, error) {
	if st != f.sess.Status || f.sess.ThreadKey <= after {
		return nil, nil
	}
	return []db.Session{f.sess}, nil
}

func (f fixedDirectory) TurnTranscript(context.Context, string, db.TranscriptLimit) ([]db.Turn, error) {
	return f.turns, nil
}

func (f fixedDirectory) ThreadReposByKeys(context.Context, []string) ([]db.ThreadRepo, error) {
	return nil, nil
}

// rawSessionError is a provider's own words, as a session's last error records them.
const rawSessionError = "docker: Error response from daemon: mounting /var/lib/threadbox/ws-7: permission denied"

func erroredSession() db.Session {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return db.Session{ThreadKey: "web:c1", Platform: "web", Provider: "docker", Status: db.SessionError,
		LastError: rawSessionError, CreatedAt: now, UpdatedAt: now, LastActivityAt: now}
}

// TestConversationSessionErrorOnlyForAdmins: the conversation API served a session's last error (the
// provider's words) to every web user, though the in-thread "status" only says there was one; now an
// admin sees it and everyone else gets the status command's note.
func TestConversationSessionErrorOnlyForAdmins(t *testing.T) {
	for _, tc := range []struct {
		name   string
		admins []string
		want   string
	}{
		{"a user", nil, bot.LastErrorNote},
		{"an admin", []string{"web:local"}, rawSessionError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin := bot.NewAdmin(newStore(t), nil, tc.admins, nil)
			srv, err := New(Options{Handler: nopHandler{}, Admin: admin, TrustLoopback: true,
				Directory: bot.NewDirectory(fixedDirectory{sess: erroredSession()})})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })

			rec := serve(srv, loopbackReq("GET", "/api/conversations/c1", nil))
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var one conversationDetailJSON
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &one))
			require.NotNil(t, one.Session)
			require.Equal(t, tc.want, one.Session.LastError)

			rec = serve(srv, loopbackReq("GET", "/api/conversations", nil))
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var list struct{ Conversations []conversationJSON }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
			require.Len(t, list.Conversations, 1)
			require.NotNil(t, list.Conversations[0].Session)
			require.Equal(t, tc.want, list.Conversations[0].Session.LastError)
			if tc.admins == nil {
				require.NotContains(t, rec.Body.String(), "daemon")
			}
		})
	}
}

// TestBadThreadKeyReplyIsBounded: the admin API's refusal of a malformed thread key quoted all of
// it (up to the 64 KiB body, to any caller: the key is checked before the admin check); it now quotes
// at most 80 runes of it, its control characters escaped, as the admin commands do.
func TestBadThreadKeyReplyIsBounded(t *testing.T) {
	for _, tc := range []struct{ name, key string }{
		{"long", "web:" + strings.Repeat("a", 5000) + ":x"},
		{"control characters", "web:\x1b[2J\r\nforged line\u202e:x"},
		{"long, in many-byte runes", "slack:" + strings.Repeat("ü", 3000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestServer(t, "")
			body, err := json.Marshal(adminJSON{Thread: tc.key})
			require.NoError(t, err)
			rec := serve(srv, loopbackReq("POST", "/api/admin/inspect", strings.NewReader(string(body))))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			var e errorJSON
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
			require.Contains(t, e.Error, "want slack:")
			quoted, _, _ := strings.Cut(e.Error, ": want")
			require.LessOrEqual(t, utf8.RuneCountInString(quoted), 100, e.Error)
			require.NotContains(t, e.Error, "\x1b")
			require.NotContains(t, e.Error, "\n")
			require.NotContains(t, e.Error, "\u202e")
		})
	}
}

// TestHistoryShowsNoRecordedErrorText: a failed turn in the history was drawn as "Sorry, that failed: "
// and the turn's recorded error, which is the failure's own text (the daemon's, the database's); the
// history now shows what the bot tells a user (bot.Explain): what happened and a ref, the recorded
// error in the log under it.
func TestHistoryShowsNoRecordedErrorText(t *testing.T) {
	for _, tc := range []struct {
		name, recorded, want string
	}{
		{"raw failure", "runtime: exec in sandbox 3f9a: Error response from daemon: pq: password authentication failed",
			"Something went wrong on my side"},
		{"interrupted", agentpool.InterruptedText, "interrupted by a restart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			dir := fixedDirectory{turns: []db.Turn{{ThreadKey: "web:c1", PlatformEventID: "e1", UserID: "local",
				Prompt: "build it", Status: db.TurnFailed, Error: tc.recorded, CreatedAt: at, FinishedAt: at}}}
			core, logs := observer.New(zapcore.InfoLevel)
			srv, err := New(Options{Handler: nopHandler{}, Directory: bot.NewDirectory(dir), TrustLoopback: true, Logger: zap.New(core)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })

			rec := serve(srv, loopbackReq("GET", "/api/conversations/c1", nil))
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			var one conversationDetailJSON
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &one))
			require.Len(t, one.Items, 2)
			post := one.Items[1]
			require.Equal(t, EventPost, post.Type)
			require.Contains(t, post.Text, tc.want)
			if tc.recorded != agentpool.InterruptedText {
				require.NotContains(t, post.Text, tc.recorded)
				for _, leak := range []string{"daemon", "pq:", "runtime:", "3f9a"} {
					require.NotContains(t, post.Text, leak)
				}
			}
			m := regexp.MustCompile(`ref ([0-9a-f]{6})`).FindStringSubmatch(post.Text)
			require.NotNil(t, m, post.Text)
			logged := logs.FilterField(zap.String("ref", m[1])).All()
			require.Len(t, logged, 1)
			require.Contains(t, logged[0].ContextMap()["error"], tc.recorded)
		})
	}
}

// TestSpoolFailureShowsARefNotTheError: an attachment that could not be written to the spool was
// refused with the file system's error (the temporary directory's path, the disk's state); it is now
// refused with what happened and a ref, the error in the log under it.
func TestSpoolFailureShowsARefNotTheError(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	srv, err := New(Options{Handler: nopHandler{}, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true, Logger: zap.New(core)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	missing := filepath.Join(t.TempDir(), "spool-dir-gone")
	t.Setenv("TMPDIR", missing) // after the store: t.TempDir reads it too

	body, ctype := multipartBody(t, 1, nil)
	r := loopbackReq("POST", "/api/conversations/c1/messages", body)
	r.Header.Set("Content-Type", ctype)
	rec := serve(srv, r)
	require.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
	var e errorJSON
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
	require.Contains(t, e.Error, "could not store the attachment")
	require.NotContains(t, e.Error, "spool-dir-gone")
	require.NotContains(t, e.Error, "no such file")
	m := regexp.MustCompile(`ref ([0-9a-f]{6})`).FindStringSubmatch(e.Error)
	require.NotNil(t, m, e.Error)
	logged := logs.FilterField(zap.String("ref", m[1])).All()
	require.Len(t, logged, 1)
	require.Contains(t, logged[0].ContextMap()["error"], "spool-dir-gone")
}

// TestEchoedInputIsBoundedAndEscaped: refusals that name what the client sent (an unknown status, an
// unknown admin command, an unknown endpoint) quoted all of it raw, control characters included (a
// terminal running the CLI would act on them); they now quote at most 80 runes of it, escaped.
func TestEchoedInputIsBoundedAndEscaped(t *testing.T) {
	long := strings.Repeat("z", 5000)
	ctl := "x\x1b[2J\r\nforged\u202e"
	admin := bot.NewAdmin(newStore(t), nil, []string{"web:local"}, nil)
	srv, err := New(Options{Handler: nopHandler{}, Admin: admin, Directory: bot.NewDirectory(newStore(t)), TrustLoopback: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	for _, tc := range []struct {
		name, method, target, body string
		want                       int
	}{
		{"status filter, long", "GET", "/api/admin/sessions?status=" + long, "", http.StatusBadRequest},
		{"status filter, control", "GET", "/api/admin/sessions?status=" + url.QueryEscape(ctl), "", http.StatusBadRequest},
		{"sessions status, long", "POST", "/api/admin/sessions", `{"status":"` + long + `"}`, http.StatusBadRequest},
		{"sessions status, control", "POST", "/api/admin/sessions", `{"status":"x\u001b[2J\r\nforged\u202e"}`, http.StatusBadRequest},
		{"admin command, long", "POST", "/api/admin/" + long, "", http.StatusNotFound},
		{"admin command, control", "POST", "/api/admin/" + url.PathEscape(ctl), "", http.StatusNotFound},
		{"endpoint, long", "GET", "/api/" + long, "", http.StatusNotFound},
		{"endpoint, control", "GET", "/api/" + url.PathEscape(ctl), "", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			rec := serve(srv, loopbackReq(tc.method, tc.target, body))
			require.Equal(t, tc.want, rec.Code, rec.Body.String())
			var e errorJSON
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
			require.LessOrEqual(t, utf8.RuneCountInString(e.Error), 250, e.Error)
			for _, raw := range []string{"\x1b", "\r", "\n", "\u202e"} {
				require.NotContains(t, e.Error, raw)
			}
		})
	}
}
