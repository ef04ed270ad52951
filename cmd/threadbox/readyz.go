package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// pinger and drainer are what /readyz asks: db.Store and *agentpool.Pool implement them.
type (
	pinger interface {
		Ping(ctx context.Context) error
	}
	drainer interface{ Draining() bool }
)

// readyTimeout bounds one /readyz (the chart's probe allows 3 s): the database's ping, then the
// providers' pings together, within the same deadline.
const readyTimeout = 2 * time.Second

// readyHandler is GET /readyz. It is unauthenticated (load balancers call it), so it says only which
// dependency is down: the database's own error can name hosts, users and paths, and goes to the log,
// once when it goes down and once when it is back (probes come every few seconds; an outage would
// otherwise write a warning on each).
func readyHandler(store pinger, pool drainer, provider func(context.Context) string, log *zap.Logger) http.Handler {
	db := &downLog{log: log, down: map[string]bool{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		err := store.Ping(pctx)
		db.report("database", err, "readyz: database ping failed", "readyz: database answers again")
		if err != nil {
			http.Error(w, "database: unavailable", http.StatusServiceUnavailable)
			return
		}
		if pool.Draining() {
			// After `admin drain` this replica takes no turns: take it out of rotation.
			http.Error(w, "draining: not taking new turns", http.StatusServiceUnavailable)
			return
		}
		status := "ready\n"
		if provider != nil {
			// The provider is reported, not required: an outage delays turns (they wait for it), and
			// taking every replica out of rotation would refuse the messages it only delays.
			status += provider(pctx) + "\n"
		}
		_, _ = w.Write([]byte(status))
	})
}

// newProviderStatus returns /readyz's line about the sandbox providers. An outage does not fail
// readiness: turns wait for the provider (lifecycle.provider_wait), and a replica taken out of
// rotation could not even accept them. The line says so for operators; the error itself goes to the
// log, on change only, not to unauthenticated callers. The providers are asked at once, so that one
// slow cloud API cannot spend the others' time and make them look down.
func newProviderStatus(provs []sandbox.Provider, log *zap.Logger) func(context.Context) string {
	changes := &downLog{log: log, down: map[string]bool{}}
	return func(ctx context.Context) string {
		st := make([]string, len(provs))
		var wg sync.WaitGroup
		for i, prov := range provs {
			wg.Go(func() { st[i] = providerStatus(ctx, prov, changes) })
		}
		wg.Wait()
		return strings.Join(st, "; ")
	}
}

func providerStatus(ctx context.Context, prov sandbox.Provider, changes *downLog) string {
	pg, ok := sandbox.As[sandbox.Pinger](prov)
	if !ok {
		return "provider " + prov.Name() + ": ok"
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err := pg.Ping(ctx)
	changes.report("provider "+prov.Name(), err, "readyz: sandbox provider does not answer", "readyz: sandbox provider answers again")
	if err != nil {
		return "provider " + prov.Name() + ": unavailable (turns wait for it)"
	}
	return "provider " + prov.Name() + ": ok"
}

// downLog logs a dependency's outage when it begins (a warning, with the error) and when it ends,
// and a still-failing check at debug only.
type downLog struct {
	log  *zap.Logger
	mu   sync.Mutex // protects down
	down map[string]bool
}

func (d *downLog) report(name string, err error, downMsg, upMsg string) {
	d.mu.Lock()
	was := d.down[name]
	d.down[name] = err != nil
	d.mu.Unlock()
	switch {
	case err != nil && !was:
		d.log.Warn(downMsg, zap.String("dependency", name), zap.Error(err))
	case err != nil:
		d.log.Debug(downMsg, zap.String("dependency", name), zap.Error(err))
	case was:
		d.log.Info(upMsg, zap.String("dependency", name))
	}
}
