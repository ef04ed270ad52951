package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/sandbox"
)

// runServe starts the bot: HTTP (health, web chat, webhooks), the agent pool and the leader-only
// loops. It returns when ctx ends (SIGTERM), after a graceful shutdown.
func (m *Main) runServe(ctx context.Context) error {
	log := m.Logger
	if err := m.Config.ValidateServe(); err != nil {
		return err
	}
	a, err := m.buildApp(ctx)
	if err != nil {
		return err
	}
	log.Info("ready", zap.String("provider", a.prov.Name()), zap.String("runtime", a.rt.Name()),
		zap.String("database", config.RedactURL(m.Config.Database.URL)), zap.String("deployment", m.Config.Deployment))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", metricsHandler(m.Config.HTTP.Token, a.metrics.Handler()))
	mux.Handle("GET /readyz", readyHandler(a.store, a.pool, func(ctx context.Context) string { return providerStatus(ctx, a.prov, log) }, log))
	ln, err := net.Listen("tcp", m.Config.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("http.addr %s: %w", m.Config.HTTP.Addr, err)
	}
	closeChat, err := m.mountChat(ctx, mux, a, ln.Addr())
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv := newHTTPServer(mux, m.httpTimeouts)
	// Live event streams never go idle, so Shutdown would wait for them: close the adapters with it.
	srv.RegisterOnShutdown(closeChat)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	loops.Go(func() { a.maint.Run(loopCtx) })

	log.Info("listening", zap.String("url", "http://"+ln.Addr().String()))
	if m.OnListen != nil {
		m.OnListen(ln.Addr().String())
	}
	select {
	case err = <-errc:
		err = fmt.Errorf("http: %w", err)
	case <-ctx.Done():
		err = nil
	}
	// Running turns get lifecycle.shutdown_grace, then are cancelled (and recorded as cancelled).
	// Sandboxes are never destroyed on shutdown: the next start picks them up.
	grace := m.Config.Lifecycle.ShutdownGrace
	log.Info("shutting down: no new messages; letting running turns finish", zap.Duration("grace", grace))
	// 1. Stop intake: no new HTTP requests (in-flight ones get a moment).
	hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if serr := srv.Shutdown(hctx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		log.Warn("http shutdown", zap.Error(serr))
	}
	cancel()
	// RegisterOnShutdown runs closeChat without waiting; wait here, so events the adapters accepted
	// reach the pool before it stops taking turns.
	closeChat()
	// 2. Drain or cancel turns. 3. Stop the loops. The store closes with Main.Close.
	a.shutdown(log, grace)
	// Command replies (status, reset, …) still being posted get a moment to finish.
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if werr := a.handler.Wait(wctx); werr != nil {
		log.Warn("command replies still in flight at exit", zap.Error(werr))
	}
	wcancel()
	stopLoops()
	loops.Wait()
	return err
}

// providerStatus is /readyz's line about the sandbox provider. An outage does not fail readiness:
// turns wait for the provider (lifecycle.provider_wait), and a replica taken out of rotation could not
// even accept them. The line says so for operators; the error itself goes to the log, not to
// unauthenticated callers.
func providerStatus(ctx context.Context, prov sandbox.Provider, log *zap.Logger) string {
	pg, ok := prov.(sandbox.Pinger)
	if !ok {
		return "provider " + prov.Name() + ": ok"
	}
	if err := pg.Ping(ctx); err != nil {
		log.Warn("readyz: sandbox provider does not answer", zap.String("provider", prov.Name()), zap.Error(err))
		return "provider " + prov.Name() + ": unavailable (turns wait for it)"
	}
	return "provider " + prov.Name() + ": ok"
}
