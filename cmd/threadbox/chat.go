package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/discord"
	"github.com/threadbox/threadbox/bot/slack"
	"github.com/threadbox/threadbox/bot/web"
)

// mountChat mounts the web chat on mux (it owns "/" and /api/; the more specific health and webhook
// routes win) and the platforms' webhooks on hooks (mux itself, or the http.public_addr listener's),
// and returns a function that stops them: Slack first (it drains the events it accepted into the
// pool), then the web chat. Calling it twice waits for the first call. login, when set, is the web
// chat's one-time login token.
func (m *Main) mountChat(ctx context.Context, mux, hooks *http.ServeMux, a *app, login string) (func(), error) {
	ws, err := web.New(web.Options{
		Handler: a.handler, Admin: a.admin, Directory: a.dir, Token: m.Config.HTTP.Token,
		TrustLoopback: m.Config.HTTP.TrustLoopback, PublicURL: m.Config.HTTP.PublicURL, LoginToken: login, Warning: a.warning, Logger: m.Logger,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("/", ws)
	a.handler.RegisterPlatform(ws)
	closers := []func(){func() { _ = ws.Close() }}
	if m.Config.Slack.BotToken != "" {
		stop, err := m.mountSlack(ctx, hooks, a)
		if err != nil {
			_ = ws.Close()
			return nil, err
		}
		closers = append([]func(){stop}, closers...)
	}
	if m.Config.Discord.BotToken != "" {
		stop, err := m.mountDiscord(ctx, mux, a)
		if err != nil {
			for _, c := range closers {
				c()
			}
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
	rdb, err := m.redis()
	if err != nil {
		return nil, err
	}
	sl, err := slack.New(slack.Options{
		BotToken: cfg.BotToken, SigningSecret: cfg.SigningSecret, AppToken: cfg.AppToken, APIURL: cfg.APIURL,
		Handler: a.handler, Admin: a.admin, Sessions: a.dir, Redis: rdb, FollowUps: cfg.FollowUps,
		RateLimit:    slack.RateLimit{UserMessages: rl.UserMessages, ChannelMessages: rl.ChannelMessages, Window: rl.Window},
		MaxFileBytes: cfg.MaxFileBytes, MaxInboundFileBytes: cfg.MaxInboundFileBytes, Logger: m.Logger,
		ContextMessages: contextMessages(cfg.ContextMessages), ContextChars: cfg.ContextChars,
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

// contextMessages maps slack.context_messages (and discord.context_messages) to the adapter's option: 0 turns reading the thread
// off (the adapter reads 0 as "default" and a negative number as off).
func contextMessages(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// redis returns the shared Redis client (redis.url), or nil when none is configured.
func (m *Main) redis() (*redis.Client, error) {
	m.rdbOnce.Do(func() {
		u := m.Config.Redis.URL
		if u == "" {
			return
		}
		opt, err := redis.ParseURL(u)
		if err != nil {
			m.rdbErr = fmt.Errorf("redis.url: %w", err)
			return
		}
		m.rdb = redis.NewClient(opt)
		m.onClose(m.rdb.Close)
	})
	return m.rdb, m.rdbErr
}

// mountDiscord starts the Discord adapter: the gateway, and HTTP interactions when a public key is
// set.
func (m *Main) mountDiscord(ctx context.Context, mux *http.ServeMux, a *app) (func(), error) {
	cfg, rl := m.Config.Discord, m.Config.RateLimit
	rdb, err := m.redis()
	if err != nil {
		return nil, err
	}
	dc, err := discord.New(discord.Options{
		BotToken: cfg.BotToken, ApplicationID: cfg.ApplicationID, PublicKey: cfg.PublicKey, APIURL: cfg.APIURL,
		GuildIDs: cfg.GuildIDs, MaxFileBytes: cfg.MaxFileBytes, Handler: a.handler, Admin: a.admin, Redis: rdb,
		RateLimit: bot.RateLimit{UserMessages: rl.UserMessages, ChannelMessages: rl.ChannelMessages, Window: rl.Window},
		Logger:    m.Logger,
		// 0 turns reading the earlier messages off, as slack.context_messages does.
		ContextMessages: contextMessages(cfg.ContextMessages), ContextChars: cfg.ContextChars,
	})
	if err != nil {
		return nil, err
	}
	// Registered before the gateway opens: a turn taken over from a dead process can be answered.
	a.handler.RegisterPlatform(dc)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = dc.Start(sctx) // a bad token fails serve at start, naming discord.bot_token
	cancel()
	if err != nil {
		_ = dc.Close()
		return nil, err
	}
	if cfg.PublicKey != "" {
		mux.Handle("POST /discord/interactions", dc.InteractionsHandler())
	}
	m.Logger.Info("discord adapter on", zap.Bool("http_interactions", cfg.PublicKey != ""), zap.Int("guilds", len(cfg.GuildIDs)))
	return func() {
		if err := dc.Close(); err != nil {
			m.Logger.Warn("discord: close", zap.Error(err))
		}
	}, nil
}
