// Package discord is the Discord adapter: the gateway (mentions that open threads, thread mentions,
// DMs, slash commands) with github.com/bwmarrin/discordgo, and the HTTP interactions endpoint
// (POST /discord/interactions) when a public key is configured.
//
// Every message is verified by where it comes from (the gateway's authenticated socket, or an
// Ed25519 signature), deduplicated (a resume may replay dispatches) and handed to the bot, which
// records it before anything is acknowledged: an interaction is deferred only once its turn is
// taken. Discord SDK types never leave this package.
package discord

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// Handler routes a message; *bot.Handler implements it.
type Handler = bot.MessageHandler

// Admin runs admin commands; *bot.Admin implements it.
type Admin = bot.AdminRunner

// Options configure the adapter.
type Options struct {
	// BotToken (discord.bot_token) authenticates the gateway and REST calls; required.
	BotToken string
	// ApplicationID (discord.application_id) registers slash commands and answers interactions.
	ApplicationID string
	// PublicKey (discord.public_key) is the hex Ed25519 key that signs HTTP interactions.
	PublicKey string
	// APIURL (discord.api_url) is the REST base (default https://discord.com/api/v10). The gateway
	// URL is asked of {APIURL}/gateway/bot. Attachments are downloaded only from Discord's CDN hosts
	// or this URL's host.
	APIURL string
	// GuildIDs register the slash commands per guild (instant) instead of globally.
	GuildIDs []string
	// MaxFileBytes caps one upload (default 10 MiB, Discord's limit for most servers).
	MaxFileBytes int64
	// MaxInboundFileBytes caps one attachment downloaded from a user's message (default 25 MiB).
	MaxInboundFileBytes int64
	// Handler gets every accepted message; required.
	Handler Handler
	// Admin runs /threadbox commands; nil answers that admin commands are not configured.
	Admin Admin
	// ContextMessages and ContextChars cap the earlier messages (of the thread, or of the channel
	// for a mention that starts a thread) that the thread's first prompt gets (defaults 20 and
	// 8000; a negative number turns reading them off).
	ContextMessages int
	ContextChars    int
	// Redis, when set, holds dedupe marks and rate-limit counters shared by every replica.
	Redis *redis.Client
	// KeyPrefix prefixes every Redis key (default "threadbox:discord:").
	KeyPrefix string
	RateLimit bot.RateLimit
	// DedupeTTL is how long a message id is remembered (default 1h).
	DedupeTTL time.Duration
	// HTTPClient calls Discord (default: a client honouring HTTPS_PROXY/NO_PROXY).
	HTTPClient *http.Client
	Logger     *zap.Logger
	Now        func() time.Time
}

// Defaults.
const (
	DefaultAPIURL              = "https://discord.com/api/v10"
	DefaultMaxFileBytes        = 10 << 20
	DefaultMaxInboundFileBytes = 25 << 20
	DefaultKeyPrefix           = "threadbox:discord:"
	DefaultDedupeTTL           = time.Hour
)

// Discord's message sizes: content is at most 2,000 characters; past five messages an answer goes
// as a file.
const (
	maxMessage = 2000
	maxChunks  = 5
)

// Intents the bot identifies with: guild channels and threads, their messages, DMs, and the
// (privileged) message content.
const Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages | discordgo.IntentMessageContent

func (o Options) withDefaults() Options {
	o.APIURL = strings.TrimRight(cmp.Or(o.APIURL, DefaultAPIURL), "/")
	o.MaxFileBytes = cmp.Or(o.MaxFileBytes, DefaultMaxFileBytes)
	o.MaxInboundFileBytes = cmp.Or(o.MaxInboundFileBytes, DefaultMaxInboundFileBytes)
	o.KeyPrefix = cmp.Or(o.KeyPrefix, DefaultKeyPrefix)
	o.ContextMessages = cmp.Or(o.ContextMessages, DefaultContextMessages)
	o.ContextChars = cmp.Or(o.ContextChars, DefaultContextChars)
	o.DedupeTTL = cmp.Or(o.DedupeTTL, DefaultDedupeTTL)
	o.RateLimit.UserMessages = cmp.Or(o.RateLimit.UserMessages, 30)
	o.RateLimit.ChannelMessages = cmp.Or(o.RateLimit.ChannelMessages, 120)
	o.RateLimit.Window = cmp.Or(o.RateLimit.Window, time.Minute)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPClient == nil {
		// Uploads go to the API host along with the reactions: room for both.
		o.HTTPClient = bot.APIClient(256)
	}
	return o
}

// Adapter is the Discord bot.
type Adapter struct {
	opts    Options
	s       *discordgo.Session
	api     *url.URL
	pub     ed25519.PublicKey
	log     *zap.Logger
	seen    *bot.Deduper
	limits  *bot.Limiter
	handler Handler
	// channels caches channel kinds ("<type>:<parent>"); they never change.
	channels *bot.TTLCache

	// base bounds background work; Close cancels it.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu protects botID and closed.
	mu     sync.Mutex
	botID  string
	closed bool
}

// New builds the adapter. It does no I/O.
func New(opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	switch {
	case opts.BotToken == "":
		return nil, errors.New("discord: BotToken (discord.bot_token) is required")
	case opts.Handler == nil:
		return nil, errors.New("discord: Handler is required")
	case opts.RateLimit.Window < time.Second:
		return nil, fmt.Errorf("discord: RateLimit.Window = %s: must be at least 1s", opts.RateLimit.Window)
	}
	api, err := url.Parse(opts.APIURL)
	if err != nil || (api.Scheme != "http" && api.Scheme != "https") || api.Host == "" {
		return nil, fmt.Errorf("discord: APIURL %q (discord.api_url) is not an http(s) URL", opts.APIURL)
	}
	var pub ed25519.PublicKey
	if opts.PublicKey != "" {
		k, err := hex.DecodeString(opts.PublicKey)
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, errors.New("discord: PublicKey (discord.public_key) must be 64 hex digits (an Ed25519 key)")
		}
		pub = k
	}
	s, err := discordgo.New("Bot " + opts.BotToken)
	if err != nil {
		return nil, fmt.Errorf("discord: %w", err)
	}
	// Every REST call, the gateway discovery included, goes to APIURL through the client.
	s.Client = &http.Client{Transport: &rewrite{api: api, next: opts.HTTPClient.Transport}}
	s.Identify.Intents = Intents
	s.StateEnabled = false
	// Events are handled in order on the gateway's reader: twenty mentions in a thread queue as sent.
	// Each handler only records and acknowledges (tens of milliseconds).
	s.SyncEvents = true
	s.LogLevel = discordgo.LogError
	log := opts.Logger.Named("discord")
	base, cancel := context.WithCancel(context.Background())
	a := &Adapter{
		opts: opts, s: s, api: api, pub: pub, log: log, handler: opts.Handler, base: base, cancel: cancel,
		seen:     bot.NewDeduper(opts.Redis, opts.KeyPrefix, opts.DedupeTTL, opts.Now, log),
		limits:   bot.NewLimiter(opts.Redis, opts.KeyPrefix, opts.RateLimit.Window, opts.Now, log),
		channels: bot.NewTTLCache(100_000, 24*time.Hour, opts.Now),
	}
	s.AddHandler(a.onReady)
	s.AddHandler(a.onMessage)
	s.AddHandler(a.onInteraction)
	return a, nil
}

// rewrite sends discordgo's requests (built on https://discord.com/api/v9/) to APIURL, and asks
// /gateway/bot where discordgo asks /gateway: the same URL, with the token checked.
type rewrite struct {
	api  *url.URL
	next http.RoundTripper
}

func (rw *rewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v"+discordgo.APIVersion+"/")
	if !ok || r.URL.Host != "discord.com" {
		return rw.next.RoundTrip(r)
	}
	if rest == "gateway" {
		rest = "gateway/bot"
	}
	r = r.Clone(r.Context())
	u := *rw.api
	u.Path = strings.TrimRight(rw.api.Path, "/") + "/" + rest
	u.RawPath = ""
	if esc := r.URL.EscapedPath(); esc != r.URL.Path {
		// Keep escapes (a reaction's emoji) as discordgo wrote them.
		u.RawPath = strings.TrimRight(rw.api.EscapedPath(), "/") + "/" + strings.TrimPrefix(esc, "/api/v"+discordgo.APIVersion+"/")
	}
	u.RawQuery = r.URL.RawQuery
	r.URL, r.Host = &u, u.Host
	return rw.next.RoundTrip(r)
}

// Check asks who the bot is (GET /users/@me), so a bad token fails at start with a clear message.
func (a *Adapter) Check(ctx context.Context) error {
	u, err := a.s.User("@me", discordgo.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("discord: GET /users/@me (check discord.bot_token and discord.api_url): %w", err)
	}
	a.setBotID(u.ID)
	return nil
}

func (a *Adapter) setBotID(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.botID = id
}

func (a *Adapter) botUserID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.botID
}

func (a *Adapter) onReady(_ *discordgo.Session, r *discordgo.Ready) {
	if r.User != nil {
		a.setBotID(r.User.ID)
	}
	a.log.Info("gateway ready", zap.Int("guilds", len(r.Guilds)))
}

// Start registers the slash commands (a bulk overwrite, per guild when GuildIDs are set) and opens
// the gateway; discordgo then keeps it up (heartbeats, resume after op 7 or a dropped socket,
// identify after op 9).
func (a *Adapter) Start(ctx context.Context) error {
	if err := a.Check(ctx); err != nil {
		return err
	}
	if a.opts.ApplicationID != "" {
		if err := a.registerCommands(ctx); err != nil {
			return err
		}
	} else {
		a.log.Warn("discord.application_id is not set: slash commands are not registered")
	}
	if err := a.s.Open(); err != nil {
		return fmt.Errorf("discord: opening the gateway: %w", err)
	}
	return nil
}

// Close stops taking events, closes the gateway and waits for background work.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	err := a.s.Close()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		a.log.Warn("background work still running after 30s; cancelling it")
	}
	a.cancel()
	if err != nil {
		return fmt.Errorf("discord: closing the gateway: %w", err)
	}
	return nil
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// goBackground runs f tracked, unless the adapter is closing.
func (a *Adapter) goBackground(f func(ctx context.Context)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.wg.Go(func() { f(a.base) })
}

// reserve takes a place for background work promised before it starts (an interaction's answer,
// once deferred): Close waits for it even if it starts after Close began. ok is false once the
// adapter is closing: then promise nothing. start runs f; release gives the place back unused.
func (a *Adapter) reserve() (start func(f func(ctx context.Context)), release func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, nil, false
	}
	a.wg.Add(1)
	var once sync.Once
	release = func() { once.Do(a.wg.Done) }
	start = func(f func(ctx context.Context)) {
		go func() {
			defer release()
			f(a.base)
		}()
	}
	return start, release, true
}

// Limits reports Discord's sizes.
func (a *Adapter) Limits() bot.Limits {
	return bot.Limits{MaxMessage: maxMessage, MaxChunks: maxChunks, MaxFileBytes: a.opts.MaxFileBytes}
}

var _ bot.Platform = (*Adapter)(nil)

// Name implements bot.Platform.
func (a *Adapter) Name() string { return "discord" }
