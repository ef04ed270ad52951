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
func TestScrapeDuringAnOutageShowsNoDetail(t *testing.T) {
	const detail = `failed to connect to host=db.internal user=threadbox: password authentication failed`
	core, logs := observer.New(zap.WarnLevel)
	m := New(failingSessions{err: errors.New(detail)}, zap.New(core))
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.NotContains(t, w.Body.String(), "db.internal")
	require.NotContains(t, w.Body.String(), "password")
	require.Contains(t, w.Body.String(), errSessionsUnavailable.Error())
	require.LessOrEqual(t, w.Body.Len(), 512, w.Body.String())
	logged := logs.All()
	require.Len(t, logged, 1)
	require.Contains(t, logged[0].ContextMap()["error"], "db.internal", "the log has the detail")
}
