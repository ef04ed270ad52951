package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/db"
)

// failingSessions fails every read, as a database outage does, with the driver's own words.
type failingSessions struct{ err error }

func (f failingSessions) SessionsByStatus(context.Context, db.SessionStatus, string, int) ([]db.Session, error) {
	return nil, f.err
}

// TestScrapeDuringAnOutageShowsNoDetail: the session count's error went into the /metrics response
// as the store gave it (a host, a user, the driver's words); the response now says only that the
// count is unavailable, and the log has the detail.
//
// And the scrape still succeeds: a failed count made the whole response a 500, so during a database
// outage every replica looked down (up == 0, ThreadboxDown: "restart it") and every other figure
// (turns failing, resolve errors) vanished when it was wanted. The outage is now its own series,
// threadbox_sessions_counted 0.
func TestScrapeDuringAnOutageShowsNoDetail(t *testing.T) {
	const detail = `failed to connect to host=db.internal user=threadbox: password authentication failed`
	core, logs := observer.New(zap.WarnLevel)
	m := New(failingSessions{err: errors.New(detail)}, zap.New(core))
	m.Leading(true)
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.NotContains(t, w.Body.String(), "db.internal")
	require.NotContains(t, w.Body.String(), "password")
	require.Contains(t, w.Body.String(), "\nthreadbox_sessions_counted 0\n")
	require.Contains(t, w.Body.String(), "\nthreadbox_leader 1\n", "the other figures are served")
	require.NotContains(t, w.Body.String(), "threadbox_sessions{")
	logged := logs.All()
	require.Len(t, logged, 1)
	require.Contains(t, logged[0].ContextMap()["error"], "db.internal", "the log has the detail")
}

func TestScrapeCountsSessionsWhenTheDatabaseAnswers(t *testing.T) {
	m := New(fakeSessions{{ThreadKey: "a", Status: db.SessionActive, Provider: "docker"}}, nil)
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), "\nthreadbox_sessions_counted 1\n")
	require.Contains(t, w.Body.String(), `threadbox_sessions{provider="docker",status="active"} 1`)
}
