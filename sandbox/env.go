package sandbox

import (
	"fmt"
	"path"
	"sort"
)

// EnvPolicy decides the environment a sandbox is created with (after seed 002):
//
//   - Passthrough names host variables copied in when set on the host (an allowlist).
//   - Set gives fixed values.
//   - Blocked names variables that never enter, whatever Passthrough or Set say. DefaultBlocked is
//     always added: configuration can extend the blocklist, never shrink it.
//
// Names in Passthrough and Blocked may be shell-style globs ("AWS_*").
type EnvPolicy struct {
	Passthrough []string          `koanf:"passthrough"`
	Set         map[string]string `koanf:"set"`
	Blocked     []string          `koanf:"blocked"`
}

// DefaultBlocked lists what must never reach a sandbox's create-time environment: cloud secrets,
// database URLs, signing keys, chat tokens, our own config, and model keys (those go only to the
// runtime process when it is launched, never into the sandbox's environment).
func DefaultBlocked() []string {
	return []string{
		// Cloud credentials.
		"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
		"GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET", "DAYTONA_API_KEY", "DENO_DEPLOY_TOKEN",
		// Databases.
		"DATABASE_URL", "DB_PASSWORD", "POSTGRES_PASSWORD", "PGPASSWORD", "MYSQL_PASSWORD",
		"REDIS_PASSWORD", "REDIS_URL",
		// Keys and signing secrets.
		"PRIVATE_KEY", "SSH_PRIVATE_KEY", "*_PRIVATE_KEY", "ENCRYPTION_KEY", "JWT_SECRET", "SECRET_KEY",
		"SIGNING_KEY", "SSH_AUTH_SOCK",
		// Third-party secrets from the seed.
		"STRIPE_SECRET_KEY", "SENDGRID_API_KEY", "TWILIO_AUTH_TOKEN",
		// Chat platform tokens and our own configuration.
		"SLACK_*", "DISCORD_*", "THREADBOX_*",
		// Model keys: runtime launch environment only.
		"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENROUTER_API_KEY",
		"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN",
		"AWS_BEARER_TOKEN_BEDROCK", "AZURE_OPENAI_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY",
		"XAI_API_KEY", "DEEPSEEK_API_KEY", "COHERE_API_KEY", "TOGETHER_API_KEY", "FIREWORKS_API_KEY",
		"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
		// The host's Docker endpoint would hand the sandbox the host.
		"DOCKER_HOST", "DOCKER_CERT_PATH",
	}
}

// Resolve computes the environment from the host's, given lookup (os.LookupEnv in production).
// It returns the environment and the names that were requested but blocked, sorted, so the caller
// can log them once at startup.
func (p EnvPolicy) Resolve(lookup func(string) (string, bool)) (env map[string]string, blocked []string, err error) {
	for _, pat := range append(append([]string{}, p.Passthrough...), p.Blocked...) {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, nil, fmt.Errorf("env pattern %q: %w", pat, err)
		}
	}
	block := NewMatcher(append(DefaultBlocked(), p.Blocked...))
	env = map[string]string{}
	seenBlocked := map[string]bool{}
	for _, name := range p.Passthrough {
		if hasGlob(name) {
			// A glob passthrough needs the host's whole environment; lookup cannot enumerate, so
			// globs are only meaningful in Blocked.
			return nil, nil, fmt.Errorf("env passthrough %q: patterns are not allowed in passthrough, list names", name)
		}
		if err := ValidateEnvName(name); err != nil {
			return nil, nil, err
		}
		if block.Match(name) {
			seenBlocked[name] = true
			continue
		}
		if v, ok := lookup(name); ok {
			env[name] = v
		}
	}
	for name, v := range p.Set {
		if err := ValidateEnvName(name); err != nil {
			return nil, nil, err
		}
		if block.Match(name) {
			seenBlocked[name] = true
			continue
		}
		env[name] = v
	}
	for name := range seenBlocked {
		blocked = append(blocked, name)
	}
	sort.Strings(blocked)
	return env, blocked, nil
}

// Matcher matches variable names against exact names and globs.
type Matcher struct {
	exact map[string]bool
	globs []string
}

// NewMatcher builds a matcher; duplicate entries are merged.
func NewMatcher(patterns []string) Matcher {
	m := Matcher{exact: map[string]bool{}}
	seen := map[string]bool{}
	for _, p := range patterns {
		if seen[p] {
			continue
		}
		seen[p] = true
		if hasGlob(p) {
			m.globs = append(m.globs, p)
		} else {
			m.exact[p] = true
		}
	}
	return m
}

// Match reports whether name is blocked.
func (m Matcher) Match(name string) bool {
	if m.exact[name] {
		return true
	}
	for _, g := range m.globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// ValidateEnvName accepts POSIX-style names: a letter or underscore, then letters, digits, underscores.
func ValidateEnvName(name string) error {
	if name == "" {
		return fmt.Errorf("empty environment variable name")
	}
	for i, c := range name {
		ok := c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return fmt.Errorf("environment variable name %q: only letters, digits and _ are allowed, not starting with a digit", name)
		}
	}
	return nil
}

func hasGlob(s string) bool {
	for _, c := range s {
		if c == '*' || c == '?' || c == '[' {
			return true
		}
	}
	return false
}
