// Package slack is the Slack adapter: the Events API over HTTP (POST /slack/events), Socket Mode,
// and the /threadbox slash command (POST /slack/commands), all with github.com/slack-go/slack.
//
// Every request is verified (signing secret), acknowledged first and worked on after, in a
// goroutine the adapter tracks so Close can drain it. Slack retries anything not acknowledged within
// 3 seconds, and sometimes sends one message under two event ids, so events are deduplicated on
// event_id and on (channel, ts): in Redis when configured (shared by replicas), else in process; the
// turn's store row (keyed by the message) is the last line of defence.
//
// Slack SDK types never leave this package: events become bot.Message, and the thread is answered
// through a bot.Replier.
package slack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// Handler routes a message; *bot.Handler implements it.
type Handler = bot.MessageHandler

// Admin runs admin commands; *bot.Admin implements it.
type Admin = bot.AdminRunner

// RateLimit bounds how many messages the bot takes per fixed window (defaults: 30 per user, 120 per
// channel, 1 minute).
type RateLimit = bot.RateLimit

// Options configure the adapter.
type Options struct {
	// BotToken (xoxb-…) calls the Web API; required.
	BotToken string
	// SigningSecret verifies HTTP requests; required for EventsHandler and CommandsHandler.
	SigningSecret string
	// AppToken (xapp-…) enables RunSocketMode.
	AppToken string
	// APIURL replaces https://slack.com/api/ (a fake, or a proxy in front of Slack). Upload URLs and
	// url_private links are trusted with the token only on slack.com hosts or on this URL's host.
	APIURL string
	// Handler gets every accepted message; required.
	Handler Handler
	// Admin runs /threadbox commands; nil answers that admin commands are not configured.
	Admin Admin
	// Sessions answers "does this thread have a session" for follow-ups (*bot.Directory); required
	// when FollowUps is set.
	Sessions bot.Sessions
	// Redis, when set, holds dedupe marks and rate-limit counters shared by every replica.
	Redis *redis.Client
	// KeyPrefix prefixes every Redis key (default "threadbox:slack:").
	KeyPrefix string
	// FollowUps makes thread replies without a mention count, in threads that already have a session.
	// It needs the message.channels (and message.groups) events. Off by default.
	FollowUps bool
	RateLimit RateLimit
	// MaxFileBytes caps one upload (default 1 GiB, Slack's limit).
	MaxFileBytes int64
	// MaxInboundFileBytes caps one attachment downloaded from a user's message (default 25 MiB);
	// MaxInboundBytes all of one message's (default 100 MiB).
	MaxInboundFileBytes int64
	MaxInboundBytes     int64
	// ContextMessages and ContextChars cap the thread's earlier messages that a mention in the middle
	// of a thread brings into its first prompt (defaults 20 and 8,000; negative turns it off).
	ContextMessages int
	ContextChars    int
	// DedupeTTL is how long an event is remembered (default 1h; Slack retries for about 5 minutes).
	DedupeTTL time.Duration
	// CommandBudget is how long a slash command may run before the reply goes to its response_url
	// instead (default 2s; Slack's deadline is 3s).
	CommandBudget time.Duration
	// DrainTimeout bounds Close's wait for accepted events (default 30s).
	DrainTimeout time.Duration
	// HTTPClient calls Slack (default: a client honouring HTTPS_PROXY/NO_PROXY).
	HTTPClient *http.Client
	Logger     *zap.Logger
	// Metrics counts events received, deduped, refused and acknowledged (default bot.NopChatMetrics).
	Metrics bot.ChatMetrics
	// Now is the clock for signatures, rate-limit windows and dedupe (default time.Now).
	Now func() time.Time
}

// Defaults.
const (
	DefaultUserMessages        = 30
	DefaultChannelMessages     = 120
	DefaultRateWindow          = time.Minute
	DefaultMaxFileBytes        = 1 << 30
	DefaultMaxInboundFileBytes = 25 << 20
	DefaultMaxInboundBytes     = 100 << 20
	DefaultDedupeTTL           = time.Hour
	DefaultCommandBudget       = 2 * time.Second
	DefaultDrainTimeout        = 30 * time.Second
	DefaultKeyPrefix           = "threadbox:slack:"
)

// Slack's message sizes (chat-platforms.md §10): text is cut at 40,000 characters and Slack asks
// for at most 4,000, so answers are split at 3,500 and go as a file past four messages.
const (
	maxMessage = 3500
	maxChunks  = 4
)

func (o Options) withDefaults() Options {
	o.RateLimit.UserMessages = cmp.Or(o.RateLimit.UserMessages, DefaultUserMessages)
	o.RateLimit.ChannelMessages = cmp.Or(o.RateLimit.ChannelMessages, DefaultChannelMessages)
	o.RateLimit.Window = cmp.Or(o.RateLimit.Window, DefaultRateWindow)
	o.MaxFileBytes = cmp.Or(o.MaxFileBytes, DefaultMaxFileBytes)
	o.MaxInboundFileBytes = cmp.Or(o.MaxInboundFileBytes, DefaultMaxInboundFileBytes)
	o.MaxInboundBytes = cmp.Or(o.MaxInboundBytes, DefaultMaxInboundBytes)
	o.ContextMessages = cmp.Or(o.ContextMessages, DefaultContextMessages)
	o.ContextChars = cmp.Or(o.ContextChars, DefaultContextChars)
	o.DedupeTTL = cmp.Or(o.DedupeTTL, DefaultDedupeTTL)
	o.CommandBudget = cmp.Or(o.CommandBudget, DefaultCommandBudget)
	o.DrainTimeout = cmp.Or(o.DrainTimeout, DefaultDrainTimeout)
	o.KeyPrefix = cmp.Or(o.KeyPrefix, DefaultKeyPrefix)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Metrics == nil {
		o.Metrics = bot.NopChatMetrics{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPClient == nil {
		// Uploads go to files.slack.com, not the API host: 64 connections are plenty.
		o.HTTPClient = bot.APIClient(64)
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.BotToken == "":
		return errors.New("slack: BotToken (slack.bot_token) is required")
	case o.Handler == nil:
		return errors.New("slack: Handler is required")
	case o.FollowUps && o.Sessions == nil:
		return errors.New("slack: Sessions is required with FollowUps (slack.follow_ups)")
	case o.RateLimit.Window < time.Second:
		return fmt.Errorf("slack: RateLimit.Window = %s: must be at least 1s", o.RateLimit.Window)
	case o.MaxFileBytes < 0, o.MaxInboundFileBytes < 0, o.MaxInboundBytes < 0:
		return errors.New("slack: size limits must not be negative")
	}
	return nil
}

// Adapter is the Slack bot.
type Adapter struct {
	opts    Options
	api     *slack.Client
	log     *zap.Logger
	now     func() time.Time
	seen    *bot.Deduper
	limits  *bot.Limiter
	queue   *tasks
	handler Handler

	// base bounds the work done after an ack; Close cancels it once the drain is over.
	base   context.Context
	cancel context.CancelFunc

	// idMu protects id: the bot's identity, asked of auth.test once. It is held only to read or set
	// id, never across the call, so the ack path (which reads it) never waits on Slack.
	idMu sync.Mutex
	id   identity
	// fetchMu serializes the auth.test calls themselves.
	fetchMu sync.Mutex

	// users caches user names for bot.User.Name.
	users *bot.TTLCache
}

// identity is who the bot is in the workspace.
type identity struct {
	UserID, BotID, TeamID string
}

// New builds the adapter. It does no I/O: the bot's identity is asked of auth.test on first need
// (or by Check).
func New(opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	copts := []slack.Option{slack.OptionHTTPClient(opts.HTTPClient)}
	if opts.APIURL != "" {
		// slack-go builds endpoints as base+method, so the base needs its trailing slash.
		copts = append(copts, slack.OptionAPIURL(strings.TrimRight(opts.APIURL, "/")+"/"))
	}
	if opts.AppToken != "" {
		copts = append(copts, slack.OptionAppLevelToken(opts.AppToken))
	}
	base, cancel := context.WithCancel(context.Background())
	log := opts.Logger.Named("slack")
	a := &Adapter{
		opts: opts, api: slack.New(opts.BotToken, copts...), log: log, now: opts.Now,
		handler: opts.Handler, base: base, cancel: cancel,
		seen:   bot.NewDeduper(opts.Redis, opts.KeyPrefix, opts.DedupeTTL, opts.Now, log),
		limits: bot.NewLimiter(opts.Redis, opts.KeyPrefix, opts.RateLimit.Window, opts.Now, log),
		queue:  newTasks(),
		users:  bot.NewTTLCache(10000, time.Hour, opts.Now),
	}
	return a, nil
}

// Check asks auth.test who the bot is, so a bad token fails at start-up with a clear message.
func (a *Adapter) Check(ctx context.Context) error {
	_, err := a.identity(ctx)
	return err
}

// identity returns the bot's user id, asking auth.test the first time (and again after a failure).
func (a *Adapter) identity(ctx context.Context) (identity, error) {
	if id := a.knownIdentity(); id.UserID != "" {
		return id, nil
	}
	a.fetchMu.Lock()
	defer a.fetchMu.Unlock()
	if id := a.knownIdentity(); id.UserID != "" {
		return id, nil // another caller fetched it meanwhile
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := a.api.AuthTestContext(ctx)
	if err != nil {
		return identity{}, fmt.Errorf("slack: auth.test (check slack.bot_token and slack.api_url): %w", err)
	}
	id := identity{UserID: res.UserID, BotID: res.BotID, TeamID: res.TeamID}
	a.idMu.Lock()
	a.id = id
	a.idMu.Unlock()
	return id, nil
}

// knownIdentity is the identity if already fetched (zero otherwise); it never calls Slack.
func (a *Adapter) knownIdentity() identity {
	a.idMu.Lock()
	defer a.idMu.Unlock()
	return a.id
}

// Close stops taking events (new ones get 503, so Slack redelivers them to another replica), waits
// up to DrainTimeout for accepted ones to be handed to the handler, then cancels what is left.
func (a *Adapter) Close() error {
	a.queue.close()
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.DrainTimeout)
	defer cancel()
	err := a.queue.wait(ctx)
	a.cancel()
	if err != nil {
		// The cancelled work winds down quickly; give it a bounded moment so nothing outlives Close.
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		_ = a.queue.wait(wctx)
		return fmt.Errorf("slack: close: events still in flight after %s: %w", a.opts.DrainTimeout, err)
	}
	return nil
}

// Limits reports Slack's sizes as the bot lays answers out for them.
func (a *Adapter) Limits() bot.Limits {
	return bot.Limits{MaxMessage: maxMessage, MaxChunks: maxChunks, MaxFileBytes: a.opts.MaxFileBytes}
}
