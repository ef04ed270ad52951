package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/db"
)

// startRecoverWait bounds the recovery pass before the listeners open.
const startRecoverWait = 30 * time.Second

// runServe starts the bot: HTTP (health, web chat, webhooks), the agent pool and the leader-only
// loops. It returns when ctx ends (SIGTERM), after a graceful shutdown.
func (m *Main) runServe(ctx context.Context) error {
	log := m.Logger
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	loginLink := fs.Bool("login-link", false, "print a one-time login link to the web chat (make run sets it)")
	if err := fs.Parse(m.args); err != nil {
		return errUsage
	}
	if err := m.strayArgs(fs.Args()); err != nil {
		return err
	}
	if err := m.Config.ValidateServe(); err != nil {
		return err
	}
	a, err := m.buildApp(ctx, db.WithWarmPools(func(opened, wanted int) {
		if opened < wanted {
			log.Warn("PostgreSQL is short of connections: this replica runs on pools that open connections on demand and give idle ones back, "+
				"slower under a burst. Give max_connections room for `wanted` per replica (README: database.lock_conns)", zap.Int("opened", opened), zap.Int("wanted", wanted))
		}
	}))
	if err != nil {
		return err
	}
	gogc, memLimit := gcSettings()
	log.Info("ready", zap.String("provider", a.provs[0].Name()), zap.Strings("providers", a.pool.Providers()), zap.String("runtime", a.rts[0].Name()), zap.Strings("runtimes", a.pool.Runtimes()),
		zap.String("database", config.RedactURL(m.Config.Database.URL)), zap.String("deployment", m.Config.Deployment),
		zap.Int64("gogc", gogc), zap.Int64("memory_limit_bytes", memLimit))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", metricsHandler(m.Config.HTTP.Token, a.metrics.Handler()))
	ready := readyHandler(a.store, a.pool, newProviderStatus(a.provs, log), log)
	mux.Handle("GET /readyz", ready)
	// The public webhooks get their own listener when http.public_addr is set, so the web chat and
	// the admin API can stay on loopback; the health checks answer on both.
	hooks := mux
	if m.Config.HTTP.PublicAddr != "" {
		hooks = http.NewServeMux()
		hooks.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		hooks.Handle("GET /readyz", ready)
	}
	ln, err := net.Listen("tcp", m.Config.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("http.addr %s: %w", m.Config.HTTP.Addr, err)
	}
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	lns = append(lns, ln)
	if hooks != mux {
		pln, err := net.Listen("tcp", m.Config.HTTP.PublicAddr)
		if err != nil {
			return fmt.Errorf("http.public_addr %s: %w", m.Config.HTTP.PublicAddr, err)
		}
		lns = append(lns, pln)
	}
	login := ""
	if *loginLink {
		login = rand.Text()
	}
	// Cloud sandboxes call the model gateway from the internet, as the webhooks come in.
	mountGateway(hooks, a.gw)
	closeChat, err := m.mountChat(ctx, mux, hooks, a, login)
	if err != nil {
		return err
	}
	// Take over a dead process's turns before taking new messages: its queued turns then run ahead
	// of messages sent after them, in each thread's order (the leader's passes do the same later,
	// for replicas that die while this one runs). A failure is not fatal: those passes retry.
	rctx, rcancel := context.WithTimeout(ctx, startRecoverWait)
	if rep, rerr := a.pool.RecoverPass(rctx); rerr != nil {
		log.Warn("recovering turns at start; the maintenance loop will retry", zap.Error(rerr))
	} else if rep != (agentpool.RecoverReport{}) {
		log.Info("took over the turns of a dead process", zap.Int("requeued", rep.Requeued),
			zap.Int("interrupted", rep.Interrupted), zap.Int("redelivered", rep.Redelivered), zap.Int("failed", rep.Failed),
			zap.Int("commands", rep.Commands))
	}
	rcancel()
	servers := []*http.Server{newHTTPServer(mux, m.httpTimeouts)}
	if hooks != mux {
		servers = append(servers, newHTTPServer(hooks, m.httpTimeouts))
	}
	// Live event streams never go idle, so Shutdown would wait for them: close the adapters with it.
	servers[0].RegisterOnShutdown(closeChat)
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		l := lns[i]
		go func() { errc <- srv.Serve(l) }()
	}
	lns = nil // the servers own them now

	loopCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var loops sync.WaitGroup
	loops.Go(func() { a.maint.Run(loopCtx) })
	// Every process, leader or not, answers its own turns that a failed intake left in no queue.
	loops.Go(func() { a.pool.RunAdopt(loopCtx, m.Config.Lifecycle.LoopInterval) })

	log.Info("listening", zap.String("url", "http://"+ln.Addr().String()),
		zap.Bool("trust_loopback", m.Config.HTTP.TrustLoopback), zap.Bool("token", m.Config.HTTP.Token != ""))
	if len(servers) > 1 {
		log.Info("public webhooks listening", zap.String("url", "http://"+m.Config.HTTP.PublicAddr))
	}
	if login != "" {
		// Straight to the console, never through the logger: logs are kept and shipped, and this
		// link makes whoever opens it first web:local.
		fmt.Fprintf(m.Stderr, "\n  Open the web chat: http://%s/?login=%s\n  (a one-time link: the first browser to open it is signed in as web:local)\n\n",
			browsable(ln.Addr()), login)
	}
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
	for _, srv := range servers {
		if serr := srv.Shutdown(hctx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			log.Warn("http shutdown", zap.Error(serr))
		}
	}
	cancel()
	// RegisterOnShutdown runs closeChat without waiting; wait here, so events the adapters accepted
	// reach the pool before it stops taking turns.
	closeChat()
	// 2. Command replies (status, reset, …) still being posted get a moment to finish, before the
	// pool's shutdown gives up this process's liveness lock: past it, another replica's recovery
	// takes the commands still recorded for a dead process's and answers them "interrupted", twice
	// with ours.
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if werr := a.handler.Wait(wctx); werr != nil {
		log.Warn("command replies still in flight at exit", zap.Error(werr))
	}
	wcancel()
	// 3. Drain or cancel turns. 4. Stop the loops. The store closes with Main.Close.
	a.shutdown(log, grace)
	stopLoops()
	loops.Wait()
	return err
}

// browsable is a listener's address as a browser on this machine reaches it: a wildcard listener
// is opened on loopback.
func browsable(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
