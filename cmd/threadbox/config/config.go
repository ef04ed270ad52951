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
	Gateway    Gateway   `koanf:"gateway"`
	Lifecycle  Lifecycle `koanf:"lifecycle"`
	Slack      Slack     `koanf:"slack"`
	Discord    Discord   `koanf:"discord"`
	Admin      Admin     `koanf:"admin"`
	Access     Access    `koanf:"access"`
	RateLimit  RateLimit `koanf:"ratelimit"`
	Repos      Repos     `koanf:"repos"`
	Git        Git       `koanf:"git"`
}

// Repos says which repository a thread's sandbox starts with (agentpool/repo).
type Repos struct {
	// Default is owner/name[@branch] (or host/owner/name[@branch]) for every thread; "" for none.
	Default string `koanf:"default"`
	// Channels overrides Default per chat channel id.
	Channels map[string]string `koanf:"channels"`
	// Allow lists host/owner or host/owner/name; only those are ever cloned. Empty allows nothing.
	Allow []string `koanf:"allow"`
	// CacheDir holds the bot's clones, fetched again before each use.
	CacheDir string `koanf:"cache_dir"`
}

// Git is the bot's side of the forge; the token never enters a sandbox.
type Git struct {
	// Token clones, fetches and pushes over HTTPS and calls the forge's API.
	Token string `koanf:"token"`
	// Host is the forge host owner/name means (default github.com); URL its base URL (default
	// https://<host>), for GitHub Enterprise or a test server.
	Host string `koanf:"host"`
	URL  string `koanf:"url"`
	// GitHubAPIURL is the REST API (https://api.github.com; GitHub Enterprise: https://<host>/api/v3).
	GitHubAPIURL string `koanf:"github_api_url"`
	// CommitName and CommitEmail are the identity commits in the sandbox carry.
	CommitName  string `koanf:"commit_name"`
	CommitEmail string `koanf:"commit_email"`
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
	// LockConns is how many PostgreSQL connections a replica keeps for locks: every running turn
	// holds one for its thread. 0 sizes it from sandbox.max_active (+ 16 for the leader, the
	// instance lock, the loops and admin actions).
	LockConns int `koanf:"lock_conns"`
}

// Redis is optional; with it, dedupe and rate limits are shared across replicas.
type Redis struct {
	URL string `koanf:"url"`
}

// HTTP is the listener for webhooks, the web chat and health checks.
type HTTP struct {
	Addr string `koanf:"addr"`
	// Token lets web chat and admin API clients in (Authorization: Bearer, or the page's ?token=).
	Token string `koanf:"token"`
	// TrustLoopback lets clients on this machine into the web chat without the token, as web:local.
	// Off by default: behind a reverse proxy or a tunnel on this machine every visitor would be local.
	TrustLoopback bool `koanf:"trust_loopback"`
	// PublicAddr, when set, is a second listener with only the public webhooks (/slack/*,
	// /discord/*) and health checks, so that Addr (the web chat and admin API) can stay on loopback.
	PublicAddr string `koanf:"public_addr"`
	// PublicURL is the address browsers open the web chat at, when a proxy in front ends TLS: an
	// https URL marks the session cookies Secure.
	PublicURL string `koanf:"public_url"`
}

// Loopback reports whether Addr listens on loopback only.
func (h HTTP) Loopback() bool { return IsLoopbackAddr(h.Addr) }

// IsLoopbackAddr reports whether a host:port listens on loopback only.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ChatPlatform names the first chat platform configured (slack or discord), or "".
func (c Config) ChatPlatform() string {
	switch {
	case c.Slack.BotToken != "":
		return "slack.bot_token"
	case c.Discord.BotToken != "":
		return "discord.bot_token"
	}
	return ""
}

// Sandbox configures where agents run.
type Sandbox struct {
	// Provider is auto, docker, local, daytona or deno. auto picks docker if a daemon answers, else
	// local (which still needs local.i_understand_no_isolation).
	Provider string `koanf:"provider"`
	Image    string `koanf:"image"`
	// Network is auto, none, restricted or full (NetworkModes). auto is restricted for an AI runtime
	// behind the model gateway on Docker, none otherwise.
	Network   string            `koanf:"network"`
	Egress    Egress            `koanf:"egress"`
	Resources sandbox.Resources `koanf:"resources"`
	Env       sandbox.EnvPolicy `koanf:"env"`
	// ReadOnlyRoot mounts the image read-only with a tmpfs /tmp; the workdir stays writable. It
	// applies only where the runtime allows it (ReadOnlyRootApplies).
	ReadOnlyRoot bool `koanf:"read_only_root"`
	// MaxActive caps the live sandboxes of the deployment; past it, new threads wait in line (an idle
	// sandbox is paused to make room when there is one). 0 means no cap.
	MaxActive int `koanf:"max_active"`
	// Providers lists the providers this deployment enables (docker, local, daytona, deno); a
	// thread may pick one with "use <provider>". Empty means just Provider. When set, Provider must
	// name one of them: it is the default for threads that pick none.
	Providers []string     `koanf:"providers"`
	Docker    DockerConfig `koanf:"docker"`
	Local     LocalConfig  `koanf:"local"`
	Daytona   Daytona      `koanf:"daytona"`
	Deno      Deno         `koanf:"deno"`
}

// NetworkModes are the spellings of sandbox.network.
var NetworkModes = []string{"auto", "none", "restricted", "full"}

// Egress configures restricted egress (sandbox.network: restricted): what a sandbox may reach
// through the bot's egress proxy besides the model gateway.
type Egress struct {
	// Allow lists host names (registry.npmjs.org, *.github.com), optionally with a port (ports 80
	// and 443 otherwise), and addresses or CIDR ranges, the only way to a non-public address. Empty:
	// the gateway only.
	Allow []string `koanf:"allow"`
	// Port is the proxy's port on the sandbox's loopback (HTTP_PROXY and HTTPS_PROXY point there).
	Port int `koanf:"port"`
}

// ReadOnlyRootApplies reports whether sandbox.read_only_root can be honoured with the runtime: the
// AI runtimes keep their sessions in the sandbox user's home directory, on the root filesystem, and
// must find them again after a pause.
func ReadOnlyRootApplies(runtimeName string) bool { return runtimeName == "shell" }

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
	// Target is the region; empty means the organisation's default.
	Target string `koanf:"target"`
	// Snapshot is what sandboxes are created from; empty means sandbox.image, as a snapshot name.
	Snapshot string `koanf:"snapshot"`
	// AutoStopMinutes stops an idle sandbox: a safety net behind the pool's own idle pause.
	AutoStopMinutes int `koanf:"auto_stop_minutes"`
	// AutoArchiveMinutes archives a sandbox stopped this long (0: Daytona's default, 7 days).
	AutoArchiveMinutes int `koanf:"auto_archive_minutes"`
	// AutoDeleteMinutes deletes a sandbox stopped this long (-1: never, Daytona's default; 0: at once).
	AutoDeleteMinutes int `koanf:"auto_delete_minutes"`
}

// Deno is the Deno Deploy sandbox provider.
type Deno struct {
	// Token is a ddo_ organization token, or a personal token together with Org (sent as X-Deno-Org).
	Token string `koanf:"token"`
	Org   string `koanf:"org"`
	// ConsoleURL is the console (management) API; SandboxURL the sandbox host, with {region} filled in.
	ConsoleURL string `koanf:"console_url"`
	SandboxURL string `koanf:"sandbox_url"`
	// Region is ord or ams.
	Region string `koanf:"region"`
	// BaseSnapshot is the snapshot a new thread's volume is made from.
	BaseSnapshot string `koanf:"base_snapshot"`
	// VolumeCapacity is each volume's size: bytes, or "10GB", "512MiB"… (300MB - 20GB).
	VolumeCapacity string `koanf:"volume_capacity"`
}

// Runtime selects the agent runtime inside the sandbox.
type Runtime struct {
	// Name is auto, shell, claude-code, opencode or sandbox-agent. auto is claude-code when
	// ANTHROPIC_API_KEY is set, opencode when OPENAI_API_KEY is, else shell.
	Name string `koanf:"name"`
	// Enabled lists the runtimes this deployment runs (shell, claude-code, opencode, sandbox-agent);
	// a thread may pick one with "runtime <name>". Empty means just Name. When set, Name must name
	// one of them: it is the default for threads that pick none.
	Enabled []string `koanf:"enabled"`
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

// Gateway is the model gateway: AI runtimes call the model APIs through it with a per-sandbox token,
// and the real keys (ANTHROPIC_API_KEY, OPENAI_API_KEY) stay in the bot's environment.
type Gateway struct {
	// Enabled routes AI runtimes on Docker through the gateway (sandboxes keep network none). Off, or
	// with the local provider, the runtime gets the key itself, as before.
	Enabled bool `koanf:"enabled"`
	// AnthropicURL and OpenAIURL are the upstreams the gateway calls.
	AnthropicURL string `koanf:"anthropic_url"`
	OpenAIURL    string `koanf:"openai_url"`
	// PublicURL is where cloud sandboxes (Daytona, Deno) reach the gateway; unused by Docker.
	PublicURL string `koanf:"public_url"`
	// SocketDir holds one directory per Docker sandbox (socket and token), bind-mounted into it; it
	// must be on the Docker daemon's host.
	SocketDir string `koanf:"socket_dir"`
	// Forwarder is a static (CGO_ENABLED=0) threadbox-forward binary; empty: this threadbox binary,
	// which must then be static itself (`threadbox forward`).
	Forwarder string `koanf:"forwarder"`
	// Port is the forwarder's port on the sandbox's loopback.
	Port   int           `koanf:"port"`
	Budget GatewayBudget `koanf:"budget"`
	// Prices is the price table per model id (a key also prices its dated snapshots; a key ending
	// in "*" every id it begins; "*" every other model), per million tokens; it turns usage into money for the money budgets and
	// for status and admin stats. Empty: no costs.
	Prices map[string]GatewayPrice `koanf:"prices"`
	// Currency names the price table's currency in replies (default USD).
	Currency string `koanf:"currency"`
}

// GatewayBudget caps model use in tokens (input plus output), and with gateway.prices in money;
// 0 is no cap.
type GatewayBudget struct {
	ThreadTokens    int64 `koanf:"thread_tokens"`
	UserDailyTokens int64 `koanf:"user_daily_tokens"`
	DailyTokens     int64 `koanf:"daily_tokens"`
	// UserDailyMoney and DailyMoney cap cost per UTC day, in the price table's currency.
	UserDailyMoney float64 `koanf:"user_daily_money"`
	DailyMoney     float64 `koanf:"daily_money"`
}

// GatewayPrice is a model's price per million input and output tokens.
type GatewayPrice struct {
	Input  float64 `koanf:"input"`
	Output float64 `koanf:"output"`
}

// Lifecycle drives the background loops.
type Lifecycle struct {
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	PausedTTL   time.Duration `koanf:"paused_ttl"`
	ReapGrace   time.Duration `koanf:"reap_grace"`
	StuckAfter  time.Duration `koanf:"stuck_after"`
	// ReconcileGrace is how long a session may sit between two states (creating, resuming, pausing,
	// destroying, error) before the reconcile loop settles it.
	ReconcileGrace time.Duration `koanf:"reconcile_grace"`
	// MaxResumeFailures is how many failed resumes of a sandbox the next message tolerates before it
	// recreates the sandbox, replaying the history.
	MaxResumeFailures int `koanf:"max_resume_failures"`
	// ProviderWait is how long a turn waits for an unavailable sandbox service (a restarting Docker
	// daemon, a cloud API down) before it fails.
	ProviderWait time.Duration `koanf:"provider_wait"`
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
	// ContextMessages and ContextChars cap the earlier messages of a thread that a mention in its
	// middle brings into the first prompt (conversations.replies); 0 messages turns it off.
	ContextMessages int `koanf:"context_messages"`
	ContextChars    int `koanf:"context_chars"`
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
	// ContextMessages and ContextChars cap the earlier messages of a thread (or of the channel, for
	// a mention that starts a thread) that the first prompt gets; 0 messages turns it off.
	ContextMessages int `koanf:"context_messages"`
	ContextChars    int `koanf:"context_chars"`
}

// Admin lists who may run admin commands.
type Admin struct {
	// Users are platform user IDs, written as platform:id (slack:U123, discord:456, web:local).
	Users []string `koanf:"users"`
}

// Access says who may use the bot on Slack and Discord. An empty list lets everyone through on its
// dimension (doctor warns); admins (admin.users) always get in. The web chat is gated by http.token
// and http.trust_loopback instead.
type Access struct {
	// SlackTeams are the Slack workspace ids (T…) the bot answers in.
	SlackTeams []string `koanf:"slack_teams"`
	// DiscordGuilds are the Discord server ids the bot answers in.
	DiscordGuilds []string `koanf:"discord_guilds"`
	// Channels are platform:channel_id (slack:C0123, discord:4567); a Discord thread matches by the
	// channel it was started in.
	Channels []string `koanf:"channels"`
	// Users are platform:user_id (slack:U0123, discord:4567), as admin.users.
	Users []string `koanf:"users"`
	// DMs lets people use the bot in direct messages (still subject to users).
	DMs bool `koanf:"dms"`
	// OwnerOnlyControls limits reset and stop to the person who started the thread, and admins.
	OwnerOnlyControls bool `koanf:"owner_only_controls"`
	// RefusalWindow is how often a refused person is told so; more messages are dropped quietly.
	RefusalWindow time.Duration `koanf:"refusal_window"`
}

// Open reports whether anyone on a configured chat platform may use the bot: no list restricts
// who, where or in which workspace.
func (a Access) Open() bool {
	return len(a.SlackTeams) == 0 && len(a.DiscordGuilds) == 0 && len(a.Channels) == 0 && len(a.Users) == 0
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
			MaxActive: 20,
			Image:     "threadbox/sandbox:latest",
			Network:   "auto",
			Egress:    Egress{Allow: []string{}, Port: 18081},
			Resources: sandbox.DefaultResources(),
			Env:       sandbox.EnvPolicy{Passthrough: []string{}, Set: map[string]string{}, Blocked: []string{}},
			Local:     LocalConfig{Dir: "./data/sandboxes"},
			Providers: []string{},
			Daytona:   Daytona{APIURL: "https://app.daytona.io/api", AutoStopMinutes: 30, AutoDeleteMinutes: -1},
			Deno: Deno{ConsoleURL: "https://console.deno.com", SandboxURL: "https://{region}.sandbox-api.deno.net",
				Region: "ord", VolumeCapacity: "10GB"},
			// Where the runtime allows it (see ReadOnlyRootApplies).
			ReadOnlyRoot: true,
		},
		Runtime: Runtime{Name: "auto", Enabled: []string{}},
		Gateway: Gateway{
			Enabled:      true,
			AnthropicURL: "https://api.anthropic.com",
			OpenAIURL:    "https://api.openai.com/v1",
			SocketDir:    "./data/gateway",
			Port:         18080,
			Currency:     "USD",
			Prices:       map[string]GatewayPrice{},
		},
		Lifecycle: Lifecycle{
			IdleTimeout:       15 * time.Minute,
			PausedTTL:         72 * time.Hour,
			ReapGrace:         10 * time.Minute,
			StuckAfter:        10 * time.Minute,
			ReconcileGrace:    5 * time.Minute,
			MaxResumeFailures: 2,
			ProviderWait:      2 * time.Minute,
			// Under Kubernetes' default 30 s termination grace, leaving time to record and reply.
			ShutdownGrace: 20 * time.Second,
			LoopInterval:  time.Minute,
			MaxQueued:     50,
		},
		Admin: Admin{Users: []string{}},
		Access: Access{
			SlackTeams: []string{}, DiscordGuilds: []string{}, Channels: []string{}, Users: []string{},
			DMs: true, OwnerOnlyControls: true, RefusalWindow: time.Hour,
		},
		Slack:     Slack{MaxFileBytes: 1 << 30, MaxInboundFileBytes: 25 << 20, ContextMessages: 20, ContextChars: 8000},
		Discord:   Discord{APIURL: "https://discord.com/api/v10", GuildIDs: []string{}, MaxFileBytes: 10 << 20, ContextMessages: 20, ContextChars: 8000},
		RateLimit: RateLimit{UserMessages: 30, ChannelMessages: 120, Window: time.Minute},
		Repos:     Repos{Channels: map[string]string{}, Allow: []string{}, CacheDir: "./data/repos"},
		Git: Git{Host: "github.com", GitHubAPIURL: "https://api.github.com",
			CommitName: "Threadbox", CommitEmail: "threadbox@users.noreply.github.com"},
	}
}

// Secrets returns every configured secret value, for log redaction.
func (c Config) Secrets() []string {
	var out []string
	all := []string{
		c.HTTP.Token, c.Sandbox.Daytona.APIKey, c.Sandbox.Deno.Token, c.Runtime.Secret,
		c.Slack.BotToken, c.Slack.SigningSecret, c.Slack.AppToken, c.Discord.BotToken, c.Git.Token,
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
