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
	mux.Handle("GET /readyz", readyHandler(a.store, a.pool, log))
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
	stopLoops()
	loops.Wait()
	return err
}
