package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/threadbox/threadbox/agentpool/egress"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/cmd/threadbox/logging"
)

// Choices accepted by enumerated keys.
var (
	Providers  = []string{"auto", "docker", "local", "daytona", "deno"}
	Runtimes   = []string{"auto", "shell", "claude-code", "opencode", "sandbox-agent"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"console", "json"}
)

// Validate checks every key, returning the first problem with the key's name and what is allowed.
func (c Config) Validate() error {
	checks := []func() error{
		func() error {
			if c.Deployment == "" || strings.ContainsAny(c.Deployment, " \t\n=,") || len(c.Deployment) > 63 {
				return fmt.Errorf("deployment = %q: must be 1-63 characters without spaces, '=' or ','", c.Deployment)
			}
			return nil
		},
		func() error { return oneOf("log.level", c.Log.Level, LogLevels) },
		func() error { return oneOf("log.format", c.Log.Format, LogFormats) },
		func() error { return c.validateDatabase() },
		func() error { return checkURL("redis.url", c.Redis.URL, []string{"redis", "rediss", "unix"}, true) },
		func() error {
			if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
				return fmt.Errorf("http.addr = %q: must be host:port, for example 127.0.0.1:8080", c.HTTP.Addr)
			}
			return nil
		},
		func() error {
			if _, _, err := net.SplitHostPort(c.HTTP.PublicAddr); c.HTTP.PublicAddr != "" && err != nil {
				return fmt.Errorf("http.public_addr = %q: must be empty or host:port, for example 0.0.0.0:8443", c.HTTP.PublicAddr)
			}
			if c.HTTP.PublicAddr != "" && c.HTTP.PublicAddr == c.HTTP.Addr {
				return fmt.Errorf("http.public_addr = %q: must differ from http.addr (leave it empty for one listener)", c.HTTP.PublicAddr)
			}
			return nil
		},
		func() error {
			// The token is the only lock on the web chat and the admin API off loopback, so it must not
			// be guessable; a value under logging's minimum length would not be redacted either.
			if n := len(c.HTTP.Token); n > 0 && n < MinTokenLen {
				return fmt.Errorf("http.token: %d characters: must be at least %d (for example the output of `openssl rand -hex 32`)", n, MinTokenLen)
			}
			return nil
		},
		func() error { return oneOf("sandbox.provider", c.Sandbox.Provider, Providers) },
		func() error {
			if c.Sandbox.Image == "" {
				return fmt.Errorf("sandbox.image: must not be empty")
			}
			return nil
		},
		func() error {
			if err := oneOf("sandbox.network", c.Sandbox.Network, NetworkModes); err != nil {
				return err
			}
			if c.Sandbox.Network == "restricted" && c.Sandbox.Provider != "docker" && c.Sandbox.Provider != "auto" {
				return fmt.Errorf("sandbox.network = restricted: needs sandbox.provider docker (its egress proxy reaches the sandbox through a mounted socket); "+
					"%s sandboxes have none or full", c.Sandbox.Provider)
			}
			if _, err := egress.ParsePolicy(c.Sandbox.Egress.Allow); err != nil {
				return err
			}
			if c.Sandbox.Egress.Port < 1024 || c.Sandbox.Egress.Port > 65535 {
				return fmt.Errorf("sandbox.egress.port = %d: must be between 1024 and 65535", c.Sandbox.Egress.Port)
			}
			if c.Sandbox.Egress.Port == c.Gateway.Port {
				// Both listen on the sandbox's loopback: in restricted mode the second would fail to bind.
				return fmt.Errorf("sandbox.egress.port = %d: must differ from gateway.port (both listen on the sandbox's loopback)", c.Sandbox.Egress.Port)
			}
			return nil
		},
		func() error {
			return c.Sandbox.Resources.Validate(func(f string) string { return "sandbox.resources." + f })
		},
		func() error {
			if _, _, err := c.Sandbox.Env.Resolve(func(string) (string, bool) { return "", false }); err != nil {
				return fmt.Errorf("sandbox.env: %w", err)
			}
			return nil
		},
		func() error { return c.validateProvider() },
		func() error { return oneOf("runtime.name", c.Runtime.Name, Runtimes) },
		func() error { return c.validateRuntimes() },
		func() error {
			if c.Runtime.API == "" {
				return nil
			}
			return oneOf("runtime.api", c.Runtime.API, []string{"anthropic", "openai", "openai-compatible"})
		},
		func() error { return checkURL("runtime.base_url", c.Runtime.BaseURL, []string{"http", "https"}, true) },
		func() error {
			return checkURL("gateway.anthropic_url", c.Gateway.AnthropicURL, []string{"http", "https"}, false)
		},
		func() error {
			return checkURL("gateway.openai_url", c.Gateway.OpenAIURL, []string{"http", "https"}, false)
		},
		func() error { return checkURL("http.public_url", c.HTTP.PublicURL, []string{"http", "https"}, true) },
		func() error {
			return checkURL("gateway.public_url", c.Gateway.PublicURL, []string{"http", "https"}, true)
		},
		func() error { return c.validateGateway() },
		func() error {
			return duration("lifecycle.idle_timeout", c.Lifecycle.IdleTimeout, time.Minute, 30*24*time.Hour)
		},
		func() error {
			return duration("lifecycle.paused_ttl", c.Lifecycle.PausedTTL, time.Hour, 365*24*time.Hour)
		},
		func() error {
			return duration("lifecycle.reap_grace", c.Lifecycle.ReapGrace, time.Minute, 24*time.Hour)
		},
		func() error {
			return duration("lifecycle.stuck_after", c.Lifecycle.StuckAfter, time.Minute, 24*time.Hour)
		},
		func() error {
			return duration("lifecycle.loop_interval", c.Lifecycle.LoopInterval, time.Second, time.Hour)
		},
		func() error {
			if c.Sandbox.MaxActive < 0 || c.Sandbox.MaxActive > 10000 {
				return fmt.Errorf("sandbox.max_active = %d: must be between 0 (no cap) and 10000", c.Sandbox.MaxActive)
			}
			return nil
		},
		func() error {
			if c.Database.LockConns < 0 || c.Database.LockConns > 10000 {
				return fmt.Errorf("database.lock_conns = %d: must be between 0 (sized from sandbox.max_active) and 10000", c.Database.LockConns)
			}
			return nil
		},
		func() error {
			if c.Lifecycle.MaxQueued < 1 || c.Lifecycle.MaxQueued > 10000 {
				return fmt.Errorf("lifecycle.max_queued = %d: must be between 1 and 10000", c.Lifecycle.MaxQueued)
			}
			return nil
		},
		func() error {
			return duration("lifecycle.reconcile_grace", c.Lifecycle.ReconcileGrace, time.Minute, 24*time.Hour)
		},
		func() error {
			return duration("lifecycle.provider_wait", c.Lifecycle.ProviderWait, time.Second, time.Hour)
		},
		func() error {
			// 0 cancels running turns at once; past an hour no orchestrator waits (Kubernetes: 30 s).
			return duration("lifecycle.shutdown_grace", c.Lifecycle.ShutdownGrace, 0, time.Hour)
		},
		func() error {
			if n := c.Lifecycle.MaxResumeFailures; n < 1 || n > 100 {
				return fmt.Errorf("lifecycle.max_resume_failures = %d: must be between 1 and 100", n)
			}
			return nil
		},
		func() error { return checkURL("slack.api_url", c.Slack.APIURL, []string{"http", "https"}, true) },
		func() error {
			if c.Slack.BotToken != "" && c.Slack.AppToken == "" && c.Slack.SigningSecret == "" {
				return fmt.Errorf("slack.signing_secret: required with slack.bot_token unless slack.app_token (Socket Mode) is set; unsigned events are refused")
			}
			return nil
		},
		func() error { return sizeRange("slack.max_file_bytes", c.Slack.MaxFileBytes) },
		func() error { return sizeRange("slack.max_inbound_file_bytes", c.Slack.MaxInboundFileBytes) },
		func() error { return intRange("slack.context_messages", c.Slack.ContextMessages, 0, 1000) },
		func() error { return intRange("slack.context_chars", c.Slack.ContextChars, 1, 200000) },
		func() error { return duration("ratelimit.window", c.RateLimit.Window, time.Second, 24*time.Hour) },
		func() error { return perWindow("ratelimit.user_messages", c.RateLimit.UserMessages) },
		func() error { return perWindow("ratelimit.channel_messages", c.RateLimit.ChannelMessages) },
		func() error { return checkURL("discord.api_url", c.Discord.APIURL, []string{"http", "https"}, true) },
		func() error { return checkURL("git.url", c.Git.URL, []string{"http", "https"}, true) },
		func() error { return sizeRange("discord.max_file_bytes", c.Discord.MaxFileBytes) },
		func() error { return intRange("discord.context_messages", c.Discord.ContextMessages, 0, 1000) },
		func() error { return intRange("discord.context_chars", c.Discord.ContextChars, 1, 200000) },
		func() error {
			if c.Discord.PublicKey == "" {
				return nil
			}
			if c.Discord.ApplicationID == "" {
				return fmt.Errorf("discord.application_id: required with discord.public_key (interaction replies go through the application's webhooks)")
			}
			if k, err := hex.DecodeString(c.Discord.PublicKey); err != nil || len(k) != 32 {
				return fmt.Errorf("discord.public_key: want the application's public key, 64 hex digits")
			}
			return nil
		},
		func() error {
			return checkURL("git.github_api_url", c.Git.GitHubAPIURL, []string{"http", "https"}, true)
		},
		func() error {
			if c.Repos.Default == "" && len(c.Repos.Channels) == 0 && len(c.Repos.Allow) == 0 {
				return nil
			}
			if c.Repos.CacheDir == "" {
				return fmt.Errorf("repos.cache_dir: required with repos.default, repos.channels or repos.allow")
			}
			for key, v := range map[string]string{"repos.default": c.Repos.Default} {
				if v != "" && !repoLike(v) {
					return fmt.Errorf("%s = %q: want owner/name or owner/name@branch", key, v)
				}
			}
			for ch, v := range c.Repos.Channels {
				if !repoLike(v) {
					return fmt.Errorf("repos.channels.%s = %q: want owner/name or owner/name@branch", ch, v)
				}
			}
			return nil
		},
		func() error {
			return qualified("admin.users", c.Admin.Users, "platform:user_id, for example slack:U012AB3CD")
		},
		func() error {
			return qualified("access.users", c.Access.Users, "platform:user_id, for example slack:U012AB3CD")
		},
		func() error {
			return qualified("access.channels", c.Access.Channels, "platform:channel_id, for example slack:C012AB3CD")
		},
		func() error {
			return duration("access.refusal_window", c.Access.RefusalWindow, time.Minute, 7*24*time.Hour)
		},
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// ValidateServe checks what only serve needs. With PostgreSQL, several replicas may share the
// sessions, and each must derive the same per-sandbox runtime passwords: a secret generated per
// machine (data/runtime.secret) would lock a replica out of the sandboxes another one started.
func (c Config) ValidateServe() error {
	if c.Postgres() && c.Runtime.Secret == "" {
		return fmt.Errorf("runtime.secret: required with a PostgreSQL database.url, and the same on every replica " +
			"(replicas share sandboxes and must agree on their runtime passwords); set it, for example, to the output of `openssl rand -hex 32`")
	}
	return nil
}

// Postgres reports whether database.url names PostgreSQL.
func (c Config) Postgres() bool {
	return strings.HasPrefix(c.Database.URL, "postgres://") || strings.HasPrefix(c.Database.URL, "postgresql://")
}

func (c Config) validateDatabase() error {
	u := c.Database.URL
	switch {
	case strings.HasPrefix(u, "sqlite:"):
		if strings.TrimPrefix(u, "sqlite:") == "" {
			return fmt.Errorf("database.url = %q: sqlite: needs a file path, for example sqlite:./data/threadbox.db", u)
		}
		return nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return checkURL("database.url", u, []string{"postgres", "postgresql"}, false)
	}
	return fmt.Errorf("database.url = %q: must start with sqlite: or postgres://", RedactURL(u))
}

// EnabledProviders is sandbox.providers as the deployment runs it: the list given, or just
// sandbox.provider (which may be auto, resolved at start). The default comes first.
func (s Sandbox) EnabledProviders() []string { return enabledList(s.Provider, s.Providers) }

// EnabledRuntimes is runtime.enabled as the deployment runs it: the list given, or just
// runtime.name (which may be auto, resolved at start). The default comes first.
func (r Runtime) EnabledRuntimes() []string { return enabledList(r.Name, r.Enabled) }

// enabledList is a list of enabled choices with its default first.
func enabledList(def string, list []string) []string {
	out := []string{def}
	for _, p := range list {
		if p != def {
			out = append(out, p)
		}
	}
	return out
}

// validateProviders checks sandbox.providers against sandbox.provider.
func (c Config) validateProviders() error {
	return validateEnabled("sandbox.providers", "sandbox.provider", c.Sandbox.Provider, c.Sandbox.Providers, Providers[1:], "providers")
}

// validateRuntimes checks runtime.enabled against runtime.name.
func (c Config) validateRuntimes() error {
	return validateEnabled("runtime.enabled", "runtime.name", c.Runtime.Name, c.Runtime.Enabled, Runtimes[1:], "runtimes")
}

// validateEnabled checks a list of enabled choices (key) against its default (defKey, def): names
// among concrete, none twice, the default among them (so not auto).
func validateEnabled(key, defKey, def string, list, concrete []string, what string) error {
	if len(list) == 0 {
		return nil
	}
	seen := map[string]bool{}
	for _, p := range list {
		switch {
		case p == "auto":
			return fmt.Errorf("%s: auto cannot be listed; name the %s (%s)", key, what, strings.Join(concrete, ", "))
		case !slices.Contains(concrete, p):
			return fmt.Errorf("%s: unknown %s %q; allowed: %s", key, strings.TrimSuffix(what, "s"), p, strings.Join(concrete, ", "))
		case seen[p]:
			return fmt.Errorf("%s: %q is listed twice", key, p)
		}
		seen[p] = true
	}
	if !seen[def] {
		return fmt.Errorf("%s = %q: must be one of %s (%s), as the default for threads that choose none",
			defKey, def, key, strings.Join(list, ", "))
	}
	return nil
}

func (c Config) validateProvider() error {
	if err := c.validateProviders(); err != nil {
		return err
	}
	for _, p := range c.Sandbox.EnabledProviders() {
		switch p {
		case "daytona":
			if c.Sandbox.Daytona.APIKey == "" {
				return fmt.Errorf("sandbox.daytona.api_key: required when daytona is enabled (sandbox.provider or sandbox.providers)")
			}
		case "deno":
			if c.Sandbox.Deno.Token == "" {
				return fmt.Errorf("sandbox.deno.token: required when deno is enabled (sandbox.provider or sandbox.providers)")
			}
			if c.Sandbox.Deno.BaseSnapshot == "" {
				return fmt.Errorf("sandbox.deno.base_snapshot: required when deno is enabled (the snapshot new threads start from)")
			}
		case "local":
			if !c.Sandbox.Local.IUnderstandNoIsolation {
				return fmt.Errorf("sandbox.local.i_understand_no_isolation: must be true to use the local provider, " +
					"which runs agent commands as host processes with no isolation")
			}
		}
	}
	if c.Sandbox.Local.Dir == "" {
		return fmt.Errorf("sandbox.local.dir: must not be empty")
	}
	if err := c.Sandbox.Deno.validate(); err != nil {
		return err
	}
	d := c.Sandbox.Daytona
	switch {
	case d.AutoStopMinutes < 1:
		return fmt.Errorf("sandbox.daytona.auto_stop_minutes = %d: must be at least 1 (a safety net against sandboxes left running)", d.AutoStopMinutes)
	case d.AutoArchiveMinutes < 0:
		return fmt.Errorf("sandbox.daytona.auto_archive_minutes = %d: must be 0 (Daytona's default) or more", d.AutoArchiveMinutes)
	case d.AutoDeleteMinutes < -1:
		return fmt.Errorf("sandbox.daytona.auto_delete_minutes = %d: must be -1 (never), 0 (when stopped) or more", d.AutoDeleteMinutes)
	}
	return checkURL("sandbox.daytona.api_url", d.APIURL, []string{"http", "https"}, true)
}

// qualified checks that every entry is platform:id with a platform the bot knows.
// MinTokenLen is http.token's least length.
const MinTokenLen = 16

func qualified(name string, list []string, want string) error {
	for _, u := range list {
		p, id, ok := strings.Cut(u, ":")
		if !ok || id == "" || !slices.Contains([]string{"slack", "discord", "web"}, p) {
			return fmt.Errorf("%s: %q must be %s (platform slack, discord or web)", name, u, want)
		}
	}
	return nil
}

func intRange(name string, n, lo, hi int) error {
	if n < lo || n > hi {
		return fmt.Errorf("%s = %d: must be between %d and %d", name, n, lo, hi)
	}
	return nil
}

func sizeRange(name string, n int64) error {
	if n < 1 || n > 1<<30 {
		return fmt.Errorf("%s = %d: must be between 1 and %d bytes", name, n, int64(1<<30))
	}
	return nil
}

func perWindow(name string, n int) error {
	if n != -1 && n < 1 {
		return fmt.Errorf("%s = %d: must be -1 (off) or at least 1", name, n)
	}
	return nil
}

func oneOf(name, v string, allowed []string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("%s = %q: must be one of %s", name, v, strings.Join(allowed, ", "))
}

func duration(name string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%s = %s: must be between %s and %s", name, d, lo, hi)
	}
	return nil
}

func checkURL(name, raw string, schemes []string, optional bool) error {
	if raw == "" && optional {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s: not a valid URL (%s)", name, RedactURL(raw))
	}
	if !slices.Contains(schemes, u.Scheme) {
		return fmt.Errorf("%s = %q: scheme must be one of %s", name, RedactURL(raw), strings.Join(schemes, ", "))
	}
	if u.Scheme != "unix" && u.Host == "" {
		return fmt.Errorf("%s = %q: has no host", name, RedactURL(raw))
	}
	return nil
}

// RedactURL hides the passwords in a URL (user-info and password= parameters, percent-encoded or
// not), so errors and logs can quote the value.
func RedactURL(raw string) string { return logging.RedactURLs(raw) }

// urlSecrets returns the passwords a URL carries, each as written and decoded, for redaction by value
// wherever they appear outside the URL (a driver's error message, say).
func urlSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	if p, ok := u.User.Password(); ok {
		out = append(out, p)
		if _, rest, ok := strings.Cut(strings.TrimPrefix(raw, u.Scheme+"://"), ":"); ok {
			if i := strings.LastIndex(rest, "@"); i >= 0 {
				out = append(out, rest[:i]) // the password as written, percent-encoding and all
			}
		}
	}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
			out = append(out, v)
			if d, err := url.QueryUnescape(v); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

// urlPublic returns the user, host and database name of a URL: printed on purpose, never secrets.
func urlPublic(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	return []string{u.User.Username(), u.Hostname(), strings.TrimPrefix(u.Path, "/")}
}

func (c Config) validateGateway() error {
	g := c.Gateway
	for key, n := range map[string]int64{"thread_tokens": g.Budget.ThreadTokens,
		"user_daily_tokens": g.Budget.UserDailyTokens, "daily_tokens": g.Budget.DailyTokens} {
		if n < 0 {
			return fmt.Errorf("gateway.budget.%s = %d: must be 0 (no cap) or a positive number of tokens", key, n)
		}
	}
	for key, n := range map[string]float64{"user_daily_money": g.Budget.UserDailyMoney, "daily_money": g.Budget.DailyMoney} {
		if !finiteAmount(n) {
			return fmt.Errorf("gateway.budget.%s = %g: must be 0 (no cap) or a positive amount", key, n)
		}
		if n > maxAmount {
			return fmt.Errorf("gateway.budget.%s = %g: must be at most %g (cost is counted in millionths, in 64 bits)", key, n, maxAmount)
		}
	}
	switch {
	case g.Port < 1 || g.Port > 65535:
		return fmt.Errorf("gateway.port = %d: must be between 1 and 65535", g.Port)
	case g.SocketDir == "":
		return errors.New("gateway.socket_dir: must not be empty")
	case (g.Budget.UserDailyMoney > 0 || g.Budget.DailyMoney > 0) && len(g.Prices) == 0:
		return errors.New("gateway.budget.*_money: needs gateway.prices (per model, per million input and output tokens) to count cost")
	}
	for model, p := range g.Prices {
		if !finiteAmount(p.Input) || !finiteAmount(p.Output) {
			return fmt.Errorf("gateway.prices.%s: input and output must be 0 or more (per million tokens)", model)
		}
		if p.Input > maxAmount || p.Output > maxAmount {
			return fmt.Errorf("gateway.prices.%s: input and output must be at most %g (per million tokens)", model, maxAmount)
		}
	}
	return nil
}

// finiteAmount is a price or money budget the gateway can count with: 0 or more, and finite (YAML's
// .nan passes a "< 0" check, and a NaN or infinite amount turns into an arbitrary int64 of micros).
// maxAmount bounds money budgets and prices: a larger one, in millionths, would not fit the 64-bit
// counters (a budget converted past them wraps negative, which reads as no cap).
const maxAmount = 1e9

func finiteAmount(n float64) bool {
	return n >= 0 && !math.IsInf(n, 1)
}

// repoLike is a light check of owner/name[@branch] (agentpool/repo.Parse has the full one).
func repoLike(v string) bool {
	ref, _, _ := strings.Cut(v, "@")
	n := strings.Count(ref, "/")
	return (n == 1 || n == 2) && !strings.HasPrefix(ref, "/") && !strings.HasSuffix(ref, "/") && !strings.Contains(ref, "//")
}

// validate checks the Deno keys that have a fixed shape, whichever provider is selected (a
// deployment may switch to it later).
func (d Deno) validate() error {
	if d.Region != "ord" && d.Region != "ams" {
		return fmt.Errorf("sandbox.deno.region = %q: must be ord or ams", d.Region)
	}
	if d.Token != "" && !strings.HasPrefix(d.Token, "ddo_") && d.Org == "" {
		return fmt.Errorf("sandbox.deno.org: required with a personal token (one not starting with ddo_); or use an organization token")
	}
	if err := checkURL("sandbox.deno.console_url", d.ConsoleURL, []string{"http", "https"}, true); err != nil {
		return err
	}
	if err := checkURL("sandbox.deno.sandbox_url", strings.ReplaceAll(d.SandboxURL, "{region}", d.Region), []string{"http", "https"}, true); err != nil {
		return err
	}
	if n, ok := parseSize(d.VolumeCapacity); !ok || n < 300e6 || n > 20<<30 {
		return fmt.Errorf("sandbox.deno.volume_capacity = %q: must be a size between 300MB and 20GB: bytes, or 10GB, 512MiB…", d.VolumeCapacity)
	}
	return nil
}

// sizePattern is bytes, or a number with a decimal (KB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB) unit.
var sizePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?$`)

// parseSize reads a size as Deno's volume capacity takes it, in bytes.
func parseSize(s string) (float64, bool) {
	m := sizePattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	unit := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m[2]]
	return n * unit, true
}
