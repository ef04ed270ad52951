// Package config loads Threadbox's configuration: embedded defaults, then an optional YAML file, then
// THREADBOX_<SECTION>_<KEY> environment variables, then validation that names the offending key.
//
// Defaults alone must give a working bot (`threadbox serve` with no file at all), so every field here
// has a default or is optional. deploy/threadbox.example.yaml documents every key; a test keeps the two
// in sync.
package config

import (
	"net"
	"slices"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// Config is the whole configuration. Field tags are the YAML keys.
type Config struct {
	// Deployment names this installation. It is stamped on every sandbox, and the reaper only ever
	// touches sandboxes of its own deployment, so two installations can share one Docker engine.
	Deployment string    `koanf:"deployment"`
	Log        Log       `koanf:"log"`
	Database   Database  `koanf:"database"`
	Redis      Redis     `koanf:"redis"`
	HTTP       HTTP      `koanf:"http"`
	Sandbox    Sandbox   `koanf:"sandbox"`
	Runtime    Runtime   `koanf:"runtime"`
	Lifecycle  Lifecycle `koanf:"lifecycle"`
	Slack      Slack     `koanf:"slack"`
	Discord    Discord   `koanf:"discord"`
	Admin      Admin     `koanf:"admin"`
	RateLimit  RateLimit `koanf:"ratelimit"`
}

// Log configures zap.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `koanf:"level"`
	// Format is console (human) or json (production).
	Format string `koanf:"format"`
}

// Database selects the session store.
type Database struct {
	// URL is sqlite:<path> or postgres://….
	URL string `koanf:"url"`
	// AutoMigrate applies pending migrations when serve starts.
	AutoMigrate bool `koanf:"auto_migrate"`
}

// Redis is optional; with it, dedupe and rate limits are shared across replicas.
type Redis struct {
	URL string `koanf:"url"`
}

// HTTP is the listener for webhooks, the web chat and health checks.
type HTTP struct {
	Addr string `koanf:"addr"`
	// Token is required for the web chat and admin API when Addr is not loopback.
	Token string `koanf:"token"`
}

// loopback reports whether Addr listens on loopback only.
func (h HTTP) loopback() bool {
	host, _, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Sandbox configures where agents run.
type Sandbox struct {
	// Provider is auto, docker, local, daytona or deno. auto picks docker if a daemon answers, else
	// local (which still needs local.i_understand_no_isolation).
	Provider  string            `koanf:"provider"`
	Image     string            `koanf:"image"`
	Network   string            `koanf:"network"`
	Resources sandbox.Resources `koanf:"resources"`
	Env       sandbox.EnvPolicy `koanf:"env"`
	// ReadOnlyRoot mounts the image read-only with a tmpfs /tmp; the workdir stays writable.
	ReadOnlyRoot bool         `koanf:"read_only_root"`
	Docker       DockerConfig `koanf:"docker"`
	Local        LocalConfig  `koanf:"local"`
	Daytona      Daytona      `koanf:"daytona"`
	Deno         Deno         `koanf:"deno"`
}

// DockerConfig is the Docker provider's own settings.
type DockerConfig struct {
	// Host overrides DOCKER_HOST (unix:///var/run/docker.sock, tcp://…).
	Host string `koanf:"host"`
}

// LocalConfig is the dev-only host provider.
type LocalConfig struct {
	// IUnderstandNoIsolation must be true: the local provider runs agent commands as host processes.
	IUnderstandNoIsolation bool `koanf:"i_understand_no_isolation"`
	// Dir holds one directory per sandbox.
	Dir string `koanf:"dir"`
}

// Daytona is the Daytona cloud provider.
type Daytona struct {
	APIURL string `koanf:"api_url"`
	APIKey string `koanf:"api_key"`
	Target string `koanf:"target"`
}

// Deno is the Deno Deploy sandbox provider.
type Deno struct {
	APIURL string `koanf:"api_url"`
	Token  string `koanf:"token"`
	Region string `koanf:"region"`
}

// Runtime selects the agent runtime inside the sandbox.
type Runtime struct {
	// Name is auto, shell, claude-code, opencode or sandbox-agent. auto is claude-code when
	// ANTHROPIC_API_KEY is set, opencode when OPENAI_API_KEY is, else shell.
	Name string `koanf:"name"`
	// API is the model's wire format for opencode and sandbox-agent: anthropic, openai or
	// openai-compatible (default: anthropic with ANTHROPIC_API_KEY, else openai).
	API string `koanf:"api"`
	// Model is the model id ("claude-sonnet-4-5", "gpt-5"); empty: the runtime's default.
	Model string `koanf:"model"`
	// BaseURL points the runtime at another model endpoint (a gateway, a proxy).
	BaseURL string `koanf:"base_url"`
	// Secret derives per-sandbox runtime passwords. When empty it is generated once and kept in
	// data/runtime.secret; several replicas must share one, so set it then.
	Secret string `koanf:"secret"`
}

// Lifecycle drives the background loops.
type Lifecycle struct {
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	PausedTTL   time.Duration `koanf:"paused_ttl"`
	ReapGrace   time.Duration `koanf:"reap_grace"`
	StuckAfter  time.Duration `koanf:"stuck_after"`
	// ShutdownGrace is how long running turns get to finish after SIGTERM before they are cancelled.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// LoopInterval is how often the leader runs the loops (recovery of dead processes' turns first),
	// and how often a follower asks for leadership.
	LoopInterval time.Duration `koanf:"loop_interval"`
	// MaxQueued caps the messages of one thread that wait or run; more get a polite refusal.
	MaxQueued int `koanf:"max_queued"`
}

// Slack is the Slack adapter; it is enabled when bot_token is set.
type Slack struct {
	BotToken      string `koanf:"bot_token"`
	SigningSecret string `koanf:"signing_secret"`
	AppToken      string `koanf:"app_token"`
	APIURL        string `koanf:"api_url"`
	// FollowUps answers later messages in a thread the bot serves without a new mention.
	FollowUps bool `koanf:"follow_ups"`
	// MaxFileBytes caps uploads into Slack; MaxInboundFileBytes caps one attachment downloaded.
	MaxFileBytes        int64 `koanf:"max_file_bytes"`
	MaxInboundFileBytes int64 `koanf:"max_inbound_file_bytes"`
}

// RateLimit bounds messages per user and per channel in a window; shared by replicas through Redis.
type RateLimit struct {
	// UserMessages and ChannelMessages are per Window; -1 turns a limit off.
	UserMessages    int           `koanf:"user_messages"`
	ChannelMessages int           `koanf:"channel_messages"`
	Window          time.Duration `koanf:"window"`
}

// Discord is the Discord adapter; it is enabled when bot_token is set.
type Discord struct {
	// BotToken turns the adapter on (the gateway connection).
	BotToken string `koanf:"bot_token"`
	// ApplicationID registers the slash commands and answers interactions.
	ApplicationID string `koanf:"application_id"`
	// PublicKey (hex Ed25519) enables POST /discord/interactions.
	PublicKey string `koanf:"public_key"`
	// APIURL is the REST base (default https://discord.com/api/v10); the gateway is found through it.
	APIURL string `koanf:"api_url"`
	// GuildIDs register the slash commands per guild (instant) instead of globally.
	GuildIDs []string `koanf:"guild_ids"`
	// MaxFileBytes caps uploads into Discord (default 10 MiB).
	MaxFileBytes int64 `koanf:"max_file_bytes"`
}

// Admin lists who may run admin commands.
type Admin struct {
	// Users are platform user IDs, written as platform:id (slack:U123, discord:456, web:local).
	Users []string `koanf:"users"`
}

// Default returns the embedded defaults.
func Default() Config {
	return Config{
		Deployment: "threadbox",
		Log:        Log{Level: "info", Format: "console"},
		Database:   Database{URL: "sqlite:./data/threadbox.db", AutoMigrate: true},
		HTTP:       HTTP{Addr: "127.0.0.1:8080"},
		Sandbox: Sandbox{
			Provider:  "auto",
			Image:     "threadbox/sandbox:latest",
			Network:   string(sandbox.NetworkNone),
			Resources: sandbox.DefaultResources(),
			Env:       sandbox.EnvPolicy{Passthrough: []string{}, Set: map[string]string{}, Blocked: []string{}},
			Local:     LocalConfig{Dir: "./data/sandboxes"},
		},
		Runtime: Runtime{Name: "auto"},
		Lifecycle: Lifecycle{
			IdleTimeout: 15 * time.Minute,
			PausedTTL:   72 * time.Hour,
			ReapGrace:   10 * time.Minute,
			StuckAfter:  10 * time.Minute,
			// Under Kubernetes' default 30 s termination grace, leaving time to record and reply.
			ShutdownGrace: 20 * time.Second,
			LoopInterval:  time.Minute,
			MaxQueued:     50,
		},
		Admin:     Admin{Users: []string{}},
		Slack:     Slack{MaxFileBytes: 1 << 30, MaxInboundFileBytes: 25 << 20},
		Discord:   Discord{APIURL: "https://discord.com/api/v10", GuildIDs: []string{}, MaxFileBytes: 10 << 20},
		RateLimit: RateLimit{UserMessages: 30, ChannelMessages: 120, Window: time.Minute},
	}
}

// Secrets returns every configured secret value, for log redaction.
func (c Config) Secrets() []string {
	var out []string
	all := []string{
		c.HTTP.Token, c.Sandbox.Daytona.APIKey, c.Sandbox.Deno.Token, c.Runtime.Secret,
		c.Slack.BotToken, c.Slack.SigningSecret, c.Slack.AppToken, c.Discord.BotToken,
	}
	all = append(all, urlSecrets(c.Database.URL)...)
	all = append(all, urlSecrets(c.Redis.URL)...)
	for _, s := range all {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Public returns values that are printed on purpose (the deployment; the database's and Redis's
// user, host and database name), so log redaction never blanks them even when a password repeats one.
func (c Config) Public() []string {
	out := []string{c.Deployment}
	out = append(out, urlPublic(c.Database.URL)...)
	out = append(out, urlPublic(c.Redis.URL)...)
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}
