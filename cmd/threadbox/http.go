package main

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// pinger and drainer are what /readyz asks: db.Store and *agentpool.Pool implement them.
type (
	pinger interface {
		Ping(ctx context.Context) error
	}
	drainer interface{ Draining() bool }
)

// readyHandler is GET /readyz. It is unauthenticated (load balancers call it), so it says only which
// dependency is down: the database's own error can name hosts, users and paths, and goes to the log.
func readyHandler(store pinger, pool drainer, log *zap.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := store.Ping(pctx); err != nil {
			log.Warn("readyz: database ping failed", zap.Error(err))
			http.Error(w, "database: unavailable", http.StatusServiceUnavailable)
			return
		}
		if pool.Draining() {
			// After `admin drain` this replica takes no turns: take it out of rotation.
			http.Error(w, "draining: not taking new turns", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}
