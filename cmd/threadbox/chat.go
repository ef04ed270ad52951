package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot/slack"
	"github.com/threadbox/threadbox/bot/web"
)

// mountChat mounts the chat adapters on mux (the web chat owns "/" and /api/; the more specific
// health and webhook routes win) and returns a function that stops them: Slack first (it drains the
// events it accepted into the pool), then the web chat. Calling it twice waits for the first call.
func (m *Main) mountChat(ctx context.Context, mux *http.ServeMux, a *app, addr net.Addr) (func(), error) {
	ws, err := web.New(web.Options{
		Handler: a.handler, Admin: a.admin, Directory: a.dir, Token: m.Config.HTTP.Token,
		Warning: a.warning, Logger: m.Logger,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("/", ws)
	a.handler.RegisterPlatform(ws)
	closers := []func(){func() { _ = ws.Close() }}
	if m.Config.Slack.BotToken != "" {
		stop, err := m.mountSlack(ctx, mux, a)
		if err != nil {
			_ = ws.Close()
			return nil, err
		}
		closers = append([]func(){stop}, closers...)
	}
	return sync.OnceFunc(func() {
		for _, c := range closers {
			c()
		}
	}), nil
}

// mountSlack starts the Slack adapter: the Events API and slash commands over HTTP when a signing
// secret is set, Socket Mode when an app token is.
func (m *Main) mountSlack(ctx context.Context, mux *http.ServeMux, a *app) (func(), error) {
	cfg, rl := m.Config.Slack, m.Config.RateLimit
	var rdb *redis.Client
	if u := m.Config.Redis.URL; u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("redis.url: %w", err)
		}
		rdb = redis.NewClient(opt)
		m.onClose(rdb.Close)
	}
	sl, err := slack.New(slack.Options{
		BotToken: cfg.BotToken, SigningSecret: cfg.SigningSecret, AppToken: cfg.AppToken, APIURL: cfg.APIURL,
		Handler: a.handler, Admin: a.admin, Sessions: a.dir, Redis: rdb, FollowUps: cfg.FollowUps,
		RateLimit:    slack.RateLimit{UserMessages: rl.UserMessages, ChannelMessages: rl.ChannelMessages, Window: rl.Window},
		MaxFileBytes: cfg.MaxFileBytes, MaxInboundFileBytes: cfg.MaxInboundFileBytes, Logger: m.Logger,
		Metrics: a.metrics,
		// Dedupe marks and rate-limit counters are the deployment's own: two installations sharing a
		// Redis must not swallow each other's events.
		KeyPrefix: "threadbox:" + m.Config.Deployment + ":slack:",
	})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = sl.Check(cctx) // a bad token fails serve at start, naming slack.bot_token
	cancel()
	if err != nil {
		return nil, err
	}
	a.handler.RegisterPlatform(sl)
	if cfg.SigningSecret != "" {
		mux.Handle("POST /slack/events", sl.EventsHandler())
		mux.Handle("POST /slack/commands", sl.CommandsHandler())
	}
	sctx, stopSocket := context.WithCancel(context.WithoutCancel(ctx))
	socketDone := make(chan struct{})
	if cfg.AppToken != "" {
		go func() {
			defer close(socketDone)
			if err := sl.RunSocketMode(sctx); err != nil {
				m.Logger.Error("slack: Socket Mode stopped", zap.Error(err))
			}
		}()
	} else {
		close(socketDone)
	}
	m.Logger.Info("slack adapter on", zap.Bool("events_api", cfg.SigningSecret != ""), zap.Bool("socket_mode", cfg.AppToken != ""))
	return func() {
		stopSocket()
		<-socketDone
		if err := sl.Close(); err != nil {
			m.Logger.Warn("slack: close", zap.Error(err))
		}
	}, nil
}
