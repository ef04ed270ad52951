package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "threadbox.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestDefaultsLoadWithNoFile(t *testing.T) {
	got, err := Load("", nil)
	require.NoError(t, err)
	require.Equal(t, Default(), got.Config)
	require.Equal(t, "127.0.0.1:8080", got.HTTP.Addr)
	require.Equal(t, "sqlite:./data/threadbox.db", got.Database.URL)
	require.Empty(t, got.Warnings)
}

func TestFileThenEnvPrecedence(t *testing.T) {
	p := writeFile(t, `
http:
  addr: 127.0.0.1:9000
sandbox:
  resources:
    memory_mb: 1024
  env:
    passthrough: [GITHUB_TOKEN]
lifecycle:
  idle_timeout: 30m
admin:
  users: [slack:U1]
`)
	got, err := Load(p, []string{
		"THREADBOX_HTTP_ADDR=127.0.0.1:9100",
		"THREADBOX_SANDBOX_RESOURCES_CPUS=1.5",
		"THREADBOX_SANDBOX_ENV_SET_FOO_BAR=baz",
		"THREADBOX_ADMIN_USERS=slack:U2,discord:3",
		"THREADBOX_LIFECYCLE_PAUSED_TTL=2h",
		"THREADBOX_SLACK_BOT_TOKEN=xoxb-1",
		"THREADBOX_SLACK_SIGNING_SECRET=s3cr3t-signing",
		"UNRELATED=1",
	})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9100", got.HTTP.Addr, "env beats file")
	require.Equal(t, 1024, got.Sandbox.Resources.MemoryMB, "file beats default")
	require.Equal(t, 1.5, got.Sandbox.Resources.CPUs)
	require.Equal(t, 256, got.Sandbox.Resources.PIDs, "untouched keys keep defaults")
	require.Equal(t, []string{"GITHUB_TOKEN"}, got.Sandbox.Env.Passthrough)
	require.Equal(t, map[string]string{"FOO_BAR": "baz"}, got.Sandbox.Env.Set)
	require.Equal(t, []string{"slack:U2", "discord:3"}, got.Admin.Users)
	require.Equal(t, 30*time.Minute, got.Lifecycle.IdleTimeout)
	require.Equal(t, 2*time.Hour, got.Lifecycle.PausedTTL)
	require.Equal(t, p, got.File)
}

func TestBadConfigNamesTheKey(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		env     []string
		wantKey string
		wantMsg string
	}{
		{name: "memory below range", file: "sandbox:\n  resources:\n    memory_mb: 100\n", wantKey: "sandbox.resources.memory_mb", wantMsg: "between 512 and 32768"},
		{name: "memory above range via env", env: []string{"THREADBOX_SANDBOX_RESOURCES_MEMORY_MB=40000"}, wantKey: "sandbox.resources.memory_mb", wantMsg: "32768"},
		{name: "cpus above range", file: "sandbox:\n  resources:\n    cpus: 17\n", wantKey: "sandbox.resources.cpus", wantMsg: "between 0.5 and 16"},
		{name: "cpus below range", env: []string{"THREADBOX_SANDBOX_RESOURCES_CPUS=0.1"}, wantKey: "sandbox.resources.cpus", wantMsg: "0.5"},
		{name: "pids", file: "sandbox:\n  resources:\n    pids: 5\n", wantKey: "sandbox.resources.pids", wantMsg: "between 32 and 4096"},
		{name: "not a number", file: "sandbox:\n  resources:\n    memory_mb: lots\n", wantKey: "sandbox.resources.memory_mb", wantMsg: "int"},
		{name: "unknown key", file: "sandbox:\n  resources:\n    memroy_mb: 1024\n", wantKey: "memroy_mb", wantMsg: "invalid keys"},
		{name: "bad duration", env: []string{"THREADBOX_LIFECYCLE_IDLE_TIMEOUT=soon"}, wantKey: "lifecycle.idle_timeout", wantMsg: "duration"},
		{name: "duration out of range", file: "lifecycle:\n  idle_timeout: 1s\n", wantKey: "lifecycle.idle_timeout", wantMsg: "between 1m0s"},
		{name: "no resume failures allowed", file: "lifecycle:\n  max_resume_failures: 0\n", wantKey: "lifecycle.max_resume_failures", wantMsg: "between 1 and 100"},
		{name: "provider wait out of range", env: []string{"THREADBOX_LIFECYCLE_PROVIDER_WAIT=2h"}, wantKey: "lifecycle.provider_wait", wantMsg: "between 1s"},
		{name: "reconcile grace out of range", file: "lifecycle:\n  reconcile_grace: 1s\n", wantKey: "lifecycle.reconcile_grace", wantMsg: "between 1m0s"},
		{name: "provider", env: []string{"THREADBOX_SANDBOX_PROVIDER=kvm"}, wantKey: "sandbox.provider", wantMsg: "one of auto, docker"},
		{name: "network", env: []string{"THREADBOX_SANDBOX_NETWORK=host"}, wantKey: "sandbox.network", wantMsg: "auto, none, restricted"},
		{name: "restricted needs docker", env: []string{"THREADBOX_SANDBOX_NETWORK=restricted", "THREADBOX_SANDBOX_PROVIDER=daytona", "THREADBOX_SANDBOX_DAYTONA_API_KEY=k"}, wantKey: "sandbox.network", wantMsg: "needs sandbox.provider docker"},
		{name: "egress allow entry", file: "sandbox:\n  egress:\n    allow: [\"https://github.com\"]\n", wantKey: "sandbox.egress.allow", wantMsg: "not a URL"},
		{name: "egress port", env: []string{"THREADBOX_SANDBOX_EGRESS_PORT=80"}, wantKey: "sandbox.egress.port", wantMsg: "between 1024"},
		{name: "database scheme", env: []string{"THREADBOX_DATABASE_URL=mysql://u:hunter22@h/db"}, wantKey: "database.url", wantMsg: "sqlite: or postgres://"},
		{name: "database key=value form", env: []string{"THREADBOX_DATABASE_URL=host=db user=u password=hunter22 dbname=tb"}, wantKey: "database.url", wantMsg: "password=xxxxx"},
		{name: "http addr", env: []string{"THREADBOX_HTTP_ADDR=8080"}, wantKey: "http.addr", wantMsg: "host:port"},
		// The token is the web chat's and admin API's only lock off loopback; a short one is guessed,
		// and one under 8 characters is not even redacted from the logs by value.
		{name: "http token too short", env: []string{"THREADBOX_HTTP_TOKEN=hunter22"}, wantKey: "http.token", wantMsg: "at least 16"},
		{name: "local needs acknowledgement", env: []string{"THREADBOX_SANDBOX_PROVIDER=local"}, wantKey: "sandbox.local.i_understand_no_isolation", wantMsg: "no isolation"},
		{name: "daytona needs key", env: []string{"THREADBOX_SANDBOX_PROVIDER=daytona"}, wantKey: "sandbox.daytona.api_key", wantMsg: "required"},
		{name: "enabled daytona needs key", env: []string{"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_PROVIDERS=docker,daytona"}, wantKey: "sandbox.daytona.api_key", wantMsg: "required"},
		{name: "unknown enabled provider", env: []string{"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_PROVIDERS=docker,kvm"}, wantKey: "sandbox.providers", wantMsg: `unknown provider "kvm"; allowed: docker, local, daytona, deno`},
		{name: "enabled deno needs token", env: []string{"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_PROVIDERS=docker,deno", "THREADBOX_SANDBOX_DENO_BASE_SNAPSHOT=tb-base"}, wantKey: "sandbox.deno.token", wantMsg: "required"},
		{name: "enabled deno needs base snapshot", env: []string{"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_PROVIDERS=docker,daytona,deno", "THREADBOX_SANDBOX_DAYTONA_API_KEY=k", "THREADBOX_SANDBOX_DENO_TOKEN=ddo_x"}, wantKey: "sandbox.deno.base_snapshot", wantMsg: "required"},
		{name: "default not enabled", file: "sandbox:\n  provider: daytona\n  providers: [docker]\n  daytona:\n    api_key: k\n", wantKey: "sandbox.provider", wantMsg: "must be one of sandbox.providers (docker)"},
		{name: "auto with a list", env: []string{"THREADBOX_SANDBOX_PROVIDERS=docker,daytona"}, wantKey: "sandbox.provider", wantMsg: `"auto": must be one of sandbox.providers`},
		{name: "auto listed", env: []string{"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_PROVIDERS=docker,auto"}, wantKey: "sandbox.providers", wantMsg: "auto cannot be listed"},
		{name: "listed twice", env: []string{"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_PROVIDERS=docker,docker"}, wantKey: "sandbox.providers", wantMsg: "listed twice"},
		{name: "unknown enabled runtime", env: []string{"THREADBOX_RUNTIME_NAME=shell", "THREADBOX_RUNTIME_ENABLED=shell,codex"}, wantKey: "runtime.enabled", wantMsg: `unknown runtime "codex"; allowed: shell, claude-code, opencode, sandbox-agent`},
		{name: "default runtime not enabled", file: "runtime:\n  name: opencode\n  enabled: [shell, claude-code]\n", wantKey: "runtime.name", wantMsg: `"opencode": must be one of runtime.enabled (shell, claude-code)`},
		{name: "auto runtime with a list", env: []string{"THREADBOX_RUNTIME_ENABLED=shell,opencode"}, wantKey: "runtime.name", wantMsg: `"auto": must be one of runtime.enabled`},
		{name: "auto runtime listed", env: []string{"THREADBOX_RUNTIME_NAME=shell", "THREADBOX_RUNTIME_ENABLED=shell,auto"}, wantKey: "runtime.enabled", wantMsg: "auto cannot be listed"},
		{name: "runtime listed twice", env: []string{"THREADBOX_RUNTIME_NAME=shell", "THREADBOX_RUNTIME_ENABLED=shell,shell"}, wantKey: "runtime.enabled", wantMsg: "listed twice"},
		{name: "daytona auto-stop is a safety net", env: []string{"THREADBOX_SANDBOX_DAYTONA_AUTO_STOP_MINUTES=0"}, wantKey: "sandbox.daytona.auto_stop_minutes", wantMsg: "at least 1"},
		{name: "daytona auto-delete", file: "sandbox:\n  daytona:\n    auto_delete_minutes: -5\n", wantKey: "sandbox.daytona.auto_delete_minutes", wantMsg: "-1 (never)"},
		{name: "daytona api url", env: []string{"THREADBOX_SANDBOX_DAYTONA_API_URL=ftp://x"}, wantKey: "sandbox.daytona.api_url", wantMsg: "http"},
		{name: "slack needs signing secret", env: []string{"THREADBOX_SLACK_BOT_TOKEN=xoxb-1"}, wantKey: "slack.signing_secret", wantMsg: "required"},
		{name: "discord public key form", env: []string{"THREADBOX_DISCORD_APPLICATION_ID=1", "THREADBOX_DISCORD_PUBLIC_KEY=xyz"}, wantKey: "discord.public_key", wantMsg: "64 hex digits"},
		{name: "discord public key needs the application", env: []string{"THREADBOX_DISCORD_PUBLIC_KEY=" + strings.Repeat("ab", 32)}, wantKey: "discord.application_id", wantMsg: "required"},
		{name: "discord upload cap", env: []string{"THREADBOX_DISCORD_MAX_FILE_BYTES=0"}, wantKey: "discord.max_file_bytes", wantMsg: "between 1"},
		{name: "discord api url", env: []string{"THREADBOX_DISCORD_API_URL=ftp://x"}, wantKey: "discord.api_url", wantMsg: "http"},
		{name: "admin user form", env: []string{"THREADBOX_ADMIN_USERS=U123"}, wantKey: "admin.users", wantMsg: "platform:user_id"},
		{name: "env name", file: "sandbox:\n  env:\n    set: {\"1BAD\": x}\n", wantKey: "sandbox.env", wantMsg: "1BAD"},
		{name: "log level", env: []string{"THREADBOX_LOG_LEVEL=loud"}, wantKey: "log.level", wantMsg: "debug, info"},
		{name: "map key needs name", env: []string{"THREADBOX_SANDBOX_ENV_SET=x"}, wantKey: "THREADBOX_SANDBOX_ENV_SET", wantMsg: "one by one"},
		{name: "yaml syntax", file: "http: [unclosed\n", wantKey: "threadbox.yaml", wantMsg: ""},
		{name: "money budget needs prices", env: []string{"THREADBOX_GATEWAY_BUDGET_DAILY_MONEY=5"}, wantKey: "gateway.budget.*_money", wantMsg: "gateway.prices"},
		{name: "negative shutdown grace", env: []string{"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=-5s"}, wantKey: "lifecycle.shutdown_grace", wantMsg: "between 0s and 1h0m0s"},
		{name: "shutdown grace beyond an hour", file: "lifecycle:\n  shutdown_grace: 200h\n", wantKey: "lifecycle.shutdown_grace", wantMsg: "between 0s and 1h0m0s"},
		{name: "egress port is the gateway's", env: []string{"THREADBOX_SANDBOX_EGRESS_PORT=18080"}, wantKey: "sandbox.egress.port", wantMsg: "gateway.port"},
		{name: "gateway port is the egress proxy's", file: "gateway:\n  port: 18081\n", wantKey: "sandbox.egress.port", wantMsg: "gateway.port"},
		{name: "empty number", env: []string{"THREADBOX_SANDBOX_MAX_ACTIVE="}, wantKey: "THREADBOX_SANDBOX_MAX_ACTIVE (sandbox.max_active)", wantMsg: "empty"},
		{name: "empty bool", env: []string{"THREADBOX_SANDBOX_READ_ONLY_ROOT="}, wantKey: "THREADBOX_SANDBOX_READ_ONLY_ROOT (sandbox.read_only_root)", wantMsg: "unset it"},
		{name: "empty duration", env: []string{"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE="}, wantKey: "lifecycle.shutdown_grace", wantMsg: "empty"},
		{name: "deno volume capacity not a size", env: []string{"THREADBOX_SANDBOX_DENO_VOLUME_CAPACITY=banana"}, wantKey: "sandbox.deno.volume_capacity", wantMsg: "300MB"},
		{name: "deno volume capacity too small", file: "sandbox:\n  deno:\n    volume_capacity: 100MB\n", wantKey: "sandbox.deno.volume_capacity", wantMsg: "20GB"},
		{name: "deno volume capacity too big", env: []string{"THREADBOX_SANDBOX_DENO_VOLUME_CAPACITY=1TB"}, wantKey: "sandbox.deno.volume_capacity", wantMsg: "between"},
		{name: "deno volume capacity in bytes too small", env: []string{"THREADBOX_SANDBOX_DENO_VOLUME_CAPACITY=1024"}, wantKey: "sandbox.deno.volume_capacity", wantMsg: "between"},
		{name: "negative token budget", env: []string{"THREADBOX_GATEWAY_BUDGET_USER_DAILY_TOKENS=-1"}, wantKey: "gateway.budget.user_daily_tokens = -1", wantMsg: "0 (no cap)"},
		{name: "negative money budget", file: "gateway:\n  budget:\n    daily_money: -2.5\n", wantKey: "gateway.budget.daily_money = -2.5", wantMsg: "0 (no cap)"},
		// YAML reads a bare number as an integer, and a duration decoded from it counts nanoseconds:
		// "shutdown_grace: 30" meant 30s and gave running turns 30ns.
		{name: "duration without a unit", file: "lifecycle:\n  shutdown_grace: 30\n", wantKey: "lifecycle.shutdown_grace", wantMsg: "no unit"},
		{name: "fractional duration without a unit", file: "lifecycle:\n  shutdown_grace: 1.5\n", wantKey: "lifecycle.shutdown_grace", wantMsg: "no unit"},
		{name: "resource duration without a unit", file: "sandbox:\n  resources:\n    exec_timeout: 3600\n", wantKey: "sandbox.resources.exec_timeout", wantMsg: "no unit"},
		{name: "negative price", file: "gateway:\n  prices:\n    m: {input: -1, output: 2}\n", wantKey: "gateway.prices.m", wantMsg: "0 or more"},
		// NaN passes a "< 0" check, and becomes math.MinInt64 micros as an int64.
		{name: "NaN price", file: "gateway:\n  prices:\n    m: {input: .nan, output: 2}\n", wantKey: "gateway.prices.m", wantMsg: "0 or more"},
		{name: "infinite price", file: "gateway:\n  prices:\n    m: {input: 1, output: .inf}\n", wantKey: "gateway.prices.m", wantMsg: "0 or more"},
		{name: "NaN money budget", file: "gateway:\n  budget:\n    daily_money: .nan\n", wantKey: "gateway.budget.daily_money", wantMsg: "0 (no cap)"},
		{name: "infinite money budget", file: "gateway:\n  budget:\n    user_daily_money: .inf\n", wantKey: "gateway.budget.user_daily_money", wantMsg: "0 (no cap)"},
		{name: "money budget past what cost counts in", file: "gateway:\n  budget:\n    daily_money: 1e300\n  prices:\n    m: {input: 1, output: 2}\n", wantKey: "gateway.budget.daily_money", wantMsg: "at most"},
		{name: "price past what cost counts in", file: "gateway:\n  prices:\n    m: {input: 1e300, output: 2}\n", wantKey: "gateway.prices.m", wantMsg: "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ""
			if tt.file != "" {
				p = writeFile(t, tt.file)
			}
			_, err := Load(p, tt.env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.wantKey)
			require.Contains(t, err.Error(), tt.wantMsg)
			require.NotContains(t, err.Error(), "hunter22", "errors must not echo passwords")
		})
	}
}

// TestProvidersList: sandbox.providers from a file or the comma-separated environment variable; the
// default comes first among the enabled providers, and an empty list enables just sandbox.provider.
func TestProvidersList(t *testing.T) {
	l, err := Load("", []string{"THREADBOX_SANDBOX_PROVIDER=daytona", "THREADBOX_SANDBOX_PROVIDERS=docker,daytona",
		"THREADBOX_SANDBOX_DAYTONA_API_KEY=k"})
	require.NoError(t, err)
	require.Equal(t, []string{"docker", "daytona"}, l.Sandbox.Providers)
	require.Equal(t, []string{"daytona", "docker"}, l.Sandbox.EnabledProviders())

	l, err = Load(writeFile(t, "sandbox:\n  provider: docker\n  providers: [docker, local]\n  local:\n    i_understand_no_isolation: true\n"), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"docker", "local"}, l.Sandbox.EnabledProviders())

	// Deno beside Docker and Daytona in one deployment (issue 14).
	l, err = Load("", []string{"THREADBOX_SANDBOX_PROVIDER=docker", "THREADBOX_SANDBOX_PROVIDERS=docker,daytona,deno",
		"THREADBOX_SANDBOX_DAYTONA_API_KEY=k", "THREADBOX_SANDBOX_DENO_TOKEN=ddo_x", "THREADBOX_SANDBOX_DENO_BASE_SNAPSHOT=tb-base"})
	require.NoError(t, err)
	require.Equal(t, []string{"docker", "daytona", "deno"}, l.Sandbox.EnabledProviders())

	l, err = Load("", []string{"THREADBOX_SANDBOX_PROVIDER=docker"})
	require.NoError(t, err)
	require.Equal(t, []string{"docker"}, l.Sandbox.EnabledProviders())
}

// TestRuntimesList: runtime.enabled from a file or the comma-separated environment variable; the
// default comes first among the enabled runtimes, and an empty list enables just runtime.name.
func TestRuntimesList(t *testing.T) {
	l, err := Load("", []string{"THREADBOX_RUNTIME_NAME=opencode", "THREADBOX_RUNTIME_ENABLED=shell,opencode"})
	require.NoError(t, err)
	require.Equal(t, []string{"shell", "opencode"}, l.Runtime.Enabled)
	require.Equal(t, []string{"opencode", "shell"}, l.Runtime.EnabledRuntimes())

	l, err = Load(writeFile(t, "runtime:\n  name: shell\n  enabled: [claude-code, shell]\n"), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"shell", "claude-code"}, l.Runtime.EnabledRuntimes())

	l, err = Load("", nil)
	require.NoError(t, err)
	require.Equal(t, []string{"auto"}, l.Runtime.EnabledRuntimes())
}

func TestMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), "nope.yaml")
}

func TestUnknownEnvIsWarnedNotFatal(t *testing.T) {
	got, err := Load("", []string{"THREADBOX_HTTP_ADR=x", "THREADBOX_CONFIG=/x", "THREADBOX_REQUIRE_SERVICES=1", "THREADBOX_TEST_POSTGRES_URL=x"})
	require.NoError(t, err)
	require.Len(t, got.Warnings, 1)
	require.Contains(t, got.Warnings[0], "THREADBOX_HTTP_ADR")
}

// TestExampleFileDocumentsEveryKey keeps deploy/threadbox.example.yaml complete and loadable: every
// struct key appears in it, it has no key the struct lacks, and its values are the defaults.
func TestExampleFileDocumentsEveryKey(t *testing.T) {
	p := filepath.Join("..", "..", "..", "deploy", "threadbox.example.yaml")
	got, err := Load(p, nil)
	require.NoError(t, err, "the example file must load as is")
	require.Equal(t, Default(), got.Config, "the example file must show the defaults")

	k := koanf.New(".")
	require.NoError(t, k.Load(file.Provider(p), yaml.Parser()))
	documented := map[string]bool{}
	for _, key := range k.Keys() {
		documented[key] = true
	}
	for _, key := range Keys() {
		// Empty maps and lists have no leaf in koanf's view; look for the parent line instead.
		if !documented[key] && !k.Exists(key) {
			t.Errorf("key %s is not in deploy/threadbox.example.yaml", key)
		}
	}
}

func TestSecretsListsConfiguredSecrets(t *testing.T) {
	for _, tc := range []struct {
		name, dbURL string
		secrets     []string
		public      []string
	}{
		{name: "user-info password", dbURL: "postgres://u:db-password@h:5432/x",
			secrets: []string{"xoxb-secret-token", "db-password"}, public: []string{"threadbox", "u", "h", "x"}},
		{name: "percent-encoded password", dbURL: "postgres://u:p%40ss%2Fword@h/x",
			secrets: []string{"p@ss/word", "p%40ss%2Fword"}},
		{name: "password parameter", dbURL: "postgres://h/x?sslmode=disable&password=q%20pass",
			secrets: []string{"q pass", "q%20pass"}},
		{name: "database user is public", dbURL: "postgres://threadbox:threadbox@127.0.0.1:5432/threadbox_test",
			secrets: []string{"threadbox"}, public: []string{"threadbox", "127.0.0.1", "threadbox_test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Slack.BotToken = "xoxb-secret-token"
			c.Database.URL = tc.dbURL
			s := c.Secrets()
			for _, want := range tc.secrets {
				require.Contains(t, s, want)
			}
			for _, v := range s {
				require.NotEmpty(t, strings.TrimSpace(v))
			}
			for _, want := range tc.public {
				require.Contains(t, c.Public(), want)
			}
			require.Contains(t, RedactURL(tc.dbURL), "xxxxx")
			require.NotContains(t, RedactURL(tc.dbURL), tc.secrets[len(tc.secrets)-1]+"@")
		})
	}
}

func TestEnvNameMapping(t *testing.T) {
	require.Equal(t, "THREADBOX_HTTP_ADDR", EnvName("http.addr"))
	require.Equal(t, "THREADBOX_SLACK_SIGNING_SECRET", EnvName("slack.signing_secret"))
	require.Equal(t, "THREADBOX_SANDBOX_RESOURCES_MEMORY_MB", EnvName("sandbox.resources.memory_mb"))
	require.Contains(t, Keys(), "sandbox.local.i_understand_no_isolation")
}

func TestDiscordKeys(t *testing.T) {
	got, err := Load("", []string{
		"THREADBOX_DISCORD_BOT_TOKEN=discord-token-1", "THREADBOX_DISCORD_APPLICATION_ID=42",
		"THREADBOX_DISCORD_PUBLIC_KEY=" + strings.Repeat("ab", 32), "THREADBOX_DISCORD_API_URL=http://127.0.0.1:1/api/v10",
		"THREADBOX_DISCORD_GUILD_IDS=1,2", "THREADBOX_DISCORD_MAX_FILE_BYTES=1000",
		"THREADBOX_DISCORD_CONTEXT_MESSAGES=0", "THREADBOX_DISCORD_CONTEXT_CHARS=500",
	})
	require.NoError(t, err)
	require.Equal(t, Discord{BotToken: "discord-token-1", ApplicationID: "42", PublicKey: strings.Repeat("ab", 32),
		APIURL: "http://127.0.0.1:1/api/v10", GuildIDs: []string{"1", "2"}, MaxFileBytes: 1000, ContextChars: 500}, got.Discord)
	require.Contains(t, got.Secrets(), "discord-token-1")
	def, err := Load("", nil)
	require.NoError(t, err)
	require.Equal(t, "https://discord.com/api/v10", def.Discord.APIURL)
	require.Equal(t, int64(10<<20), def.Discord.MaxFileBytes)
	require.Equal(t, []int{20, 8000}, []int{def.Discord.ContextMessages, def.Discord.ContextChars}, "as Slack's")
	_, err = Load("", []string{"THREADBOX_DISCORD_CONTEXT_MESSAGES=-1"})
	require.ErrorContains(t, err, "discord.context_messages")
}

func TestGatewayPricesLoad(t *testing.T) {
	p := writeFile(t, "gateway:\n  prices:\n    claude-sonnet-4-5: {input: 3, output: 15}\n    gpt-4.1: {input: 2, output: 8}\n    \"*\": {input: 1, output: 2}\n  currency: EUR\n")
	got, err := Load(p, []string{"THREADBOX_GATEWAY_BUDGET_DAILY_MONEY=12.5"})
	require.NoError(t, err)
	require.Equal(t, map[string]GatewayPrice{"claude-sonnet-4-5": {Input: 3, Output: 15}, "gpt-4.1": {Input: 2, Output: 8}, "*": {Input: 1, Output: 2}}, got.Gateway.Prices)
	require.Equal(t, 12.5, got.Gateway.Budget.DailyMoney)
	require.Equal(t, "EUR", got.Gateway.Currency)
}

// TestDenoVolumeCapacityForms: the sizes the README shows are accepted.
func TestDenoVolumeCapacityForms(t *testing.T) {
	for _, v := range []string{"10GB", "512MiB", "300MB", "20GB", "20GiB", "1073741824", "1.5GB"} {
		_, err := Load("", []string{"THREADBOX_SANDBOX_DENO_VOLUME_CAPACITY=" + v})
		require.NoError(t, err, v)
	}
}
