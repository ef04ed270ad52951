package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/db"
)

// failingDirectory is a directory store whose every read fails with err.
type failingDirectory struct{ err error }

var _ bot.DirectoryStore = failingDirectory{}

func (f failingDirectory) SessionGet(context.Context, string) (db.Session, error) {
	return db.Session{}, f.err
}
func (f failingDirectory) SessionsByStatus(context.Context, db.SessionStatus, string, int) ([]db.Session, error) {
	return nil, f.err
}
func (f failingDirectory) TurnTranscript(context.Context, string, db.TranscriptLimit) ([]db.Turn, error) {
	return nil, f.err
}
func (f failingDirectory) ThreadReposByKeys(context.Context, []string) ([]db.ThreadRepo, error) {
	return nil, f.err
}

// TestAPIErrorsShowARefNotTheError: a failure the API did not expect answers with the bot's text for
// its code, a status that fits, and a ref; the full error is in the log under that ref.
func TestAPIErrorsShowARefNotTheError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantText   string
	}{
		{"database held elsewhere", fmt.Errorf("db: sqlite /var/lib/threadbox/tb.db: %w", db.ErrLocked), http.StatusServiceUnavailable, "Try again in a few minutes"},
		{"unclassified", errors.New("db: pq: relation \"sessions\" does not exist"), http.StatusInternalServerError, "Something went wrong on my side"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			srv, err := New(Options{Handler: nopHandler{}, Directory: bot.NewDirectory(failingDirectory{err: tt.err}), TrustLoopback: true, Logger: zap.New(core)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })

			rec := serve(srv, loopbackReq("GET", "/api/conversations", nil))
			require.Equal(t, tt.wantStatus, rec.Code)
			var e errorJSON
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
			require.Contains(t, e.Error, tt.wantText)
			for _, leak := range []string{"db:", "sqlite", "pq:", "/var/lib", "sessions"} {
				require.NotContains(t, e.Error, leak)
			}
			m := regexp.MustCompile(`ref ([0-9a-f]{6})`).FindStringSubmatch(e.Error)
			require.NotNil(t, m, e.Error)
			logged := logs.FilterField(zap.String("ref", m[1])).All()
			require.Len(t, logged, 1)
			require.Equal(t, tt.err.Error(), logged[0].ContextMap()["error"])
		})
	}
}

// TestJSONKeysAreExact: a request body's keys are taken only as the API spells them. encoding/json
// matches keys case-insensitively and lets a later duplicate win, so {"TEXT": ...} was taken as the
// text, and {"text": "a", "Text": "b"} ran "b" where a proxy or log that reads exact keys saw "a".
func TestJSONKeysAreExact(t *testing.T) {
	tests := []struct {
		name, path, body string
		want             int
	}{
		{"exact key", "/api/conversations/c1/messages", `{"text":"hi"}`, http.StatusAccepted},
		{"key in another case", "/api/conversations/c1/messages", `{"TEXT":"hi"}`, http.StatusBadRequest},
		{"duplicate key differing by case", "/api/conversations/c1/messages", `{"text":"a","Text":"b"}`, http.StatusBadRequest},
		{"duplicate key", "/api/conversations/c1/messages", `{"text":"a","text":"b"}`, http.StatusBadRequest},
		{"not an object", "/api/conversations/c1/messages", `["hi"]`, http.StatusBadRequest},
		{"null", "/api/conversations/c1/messages", `null`, http.StatusBadRequest},
		{"create: exact key", "/api/conversations", `{"title":"t"}`, http.StatusCreated},
		{"create: key in another case", "/api/conversations", `{"Title":"t"}`, http.StatusBadRequest},
		{"create: empty body", "/api/conversations", ``, http.StatusCreated},
		{"admin: key in another case", "/api/admin/logs", `{"THREAD":"web:x"}`, http.StatusBadRequest},
	}
	srv := newTestServer(t, "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(srv, loopbackReq("POST", tt.path, strings.NewReader(tt.body)))
			require.Equal(t, tt.want, rec.Code, rec.Body.String())
		})
	}
}
