package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/db"
)

// brokenStore fails one read with an error that names the database's address.
type brokenStore struct {
	db.Store
	fail string
}

var errInternal = errors.New("db: dial tcp 10.1.2.3:5432: connect: connection refused")

func (s brokenStore) SessionGet(ctx context.Context, k string) (db.Session, error) {
	if s.fail == "session" {
		return db.Session{}, errInternal
	}
	return s.Store.SessionGet(ctx, k)
}

func (s brokenStore) TurnGetRunning(ctx context.Context, k string) (db.Turn, error) {
	if s.fail == "turn" {
		return db.Turn{}, errInternal
	}
	return s.Store.TurnGetRunning(ctx, k)
}

func (s brokenStore) TurnUsageTotals(ctx context.Context, k, u string, since time.Time) (db.UsageTotals, error) {
	if s.fail == "usage" {
		return db.UsageTotals{}, errInternal
	}
	return s.Store.TurnUsageTotals(ctx, k, u, since)
}

// TestStoreErrorsStayInside: a failing database is a 503 the agent may retry, saying which check
// failed, but never the database's own error (its address, its SQL): the agent prints what it gets.
func TestStoreErrorsStayInside(t *testing.T) {
	for _, fail := range []string{"session", "turn", "usage"} {
		t.Run(fail, func(t *testing.T) {
			base := newEnv(t, Budget{ThreadTokens: 1000})
			gen := base.session(t, "web:c1")
			base.turn(t, "web:c1", "U1", "ev1")
			g, err := New(Config{Secret: testSecret, AnthropicURL: base.upstreamURL, AnthropicKey: anthropicKey,
				Budget: Budget{ThreadTokens: 1000}, SocketDir: shortTempDir(t)}, brokenStore{base.store, fail}, zaptest.NewLogger(t))
			require.NoError(t, err)
			srv := httptest.NewServer(g)
			t.Cleanup(srv.Close)
			e := &env{g: g, store: base.store, fake: base.fake, url: srv.URL}
			resp := e.do(t.Context(), t, apiCalls[0], Token(testSecret, "web:c1", gen), "hi", false)
			body := readAll(t, resp)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
			require.Contains(t, body, "threadbox gateway")
			require.False(t, strings.Contains(body, "10.1.2.3") || strings.Contains(body, "dial tcp"), body)
		})
	}
}
