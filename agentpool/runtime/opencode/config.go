package opencode

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// API kinds a Model can speak, each mapped to the AI SDK package opencode bundles (no npm install
// happens in the sandbox: reference/agent-runtimes.md §1).
const (
	// APIAnthropic is the Anthropic messages API (@ai-sdk/anthropic).
	APIAnthropic = "anthropic"
	// APIOpenAI is the OpenAI Responses API (@ai-sdk/openai).
	APIOpenAI = "openai"
	// APIOpenAICompatible is an OpenAI chat-completions server (@ai-sdk/openai-compatible).
	APIOpenAICompatible = "openai-compatible"
)

// ModelKeyEnv carries the API key into the opencode process; the config only names it
// ({env:…}), so OPENCODE_CONFIG_CONTENT holds no secret.
const ModelKeyEnv = "THREADBOX_MODEL_API_KEY"

// providerID is the name of the one provider Threadbox configures.
const providerID = "threadbox"

// Model is the model opencode uses. The key is sent to the opencode process only, as ModelKeyEnv in
// its environment at launch; String redacts it.
type Model struct {
	// API selects the wire format (APIAnthropic, APIOpenAI, APIOpenAICompatible; default
	// APIAnthropic).
	API string
	// Name is the model id ("claude-sonnet-4-5", "gpt-5", …).
	Name string
	// BaseURL includes the version path ("https://api.anthropic.com/v1"); empty: the SDK's default.
	BaseURL string
	// APIKey is the provider key.
	APIKey string
	// ContextTokens and OutputTokens bound the model (defaults 200000 and 8192); opencode needs them
	// to decide when to compact.
	ContextTokens, OutputTokens int
}

// String renders the model without the key.
func (m Model) String() string {
	key := ""
	if m.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("%s/%s{base_url=%q api_key=%s}", m.API, m.Name, m.BaseURL, key)
}

func (m Model) withDefaults() Model {
	if m.API == "" {
		m.API = APIAnthropic
	}
	if m.ContextTokens == 0 {
		m.ContextTokens = 200000
	}
	if m.OutputTokens == 0 {
		m.OutputTokens = 8192
	}
	return m
}

// Validate checks the settings opencode cannot run without.
func (m Model) Validate() error {
	m = m.withDefaults()
	if m.Name == "" {
		return fmt.Errorf("opencode: model name is required")
	}
	if _, ok := sdkPackages[m.API]; !ok {
		return fmt.Errorf("opencode: model API %q: must be %s, %s or %s", m.API, APIAnthropic, APIOpenAI, APIOpenAICompatible)
	}
	return nil
}

var sdkPackages = map[string]string{
	APIAnthropic:        "@ai-sdk/anthropic",
	APIOpenAI:           "@ai-sdk/openai",
	APIOpenAICompatible: "@ai-sdk/openai-compatible",
}

// ModelRef is how opencode names the configured model ("threadbox/<name>").
func (m Model) ModelRef() string { return providerID + "/" + m.Name }

// ConfigContent renders OPENCODE_CONFIG_CONTENT: one provider with one model, used for everything
// (also the small model, so that no built-in provider is ever called), and the permissions a headless
// agent needs. Without external_directory, a write outside the session directory waits forever for
// an approval nobody gives.
func ConfigContent(m Model) (string, error) {
	if err := m.Validate(); err != nil {
		return "", err
	}
	m = m.withDefaults()
	options := map[string]any{"apiKey": "{env:" + ModelKeyEnv + "}"}
	if m.BaseURL != "" {
		options["baseURL"] = strings.TrimSuffix(m.BaseURL, "/")
	}
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{providerID: map[string]any{
			"npm":     sdkPackages[m.API],
			"name":    "Threadbox",
			"options": options,
			"models": map[string]any{m.Name: map[string]any{
				"name":      m.Name,
				"tool_call": true,
				"limit":     map[string]int{"context": m.ContextTokens, "output": m.OutputTokens},
			}},
		}},
		"model":       m.ModelRef(),
		"small_model": m.ModelRef(),
		"permission": map[string]string{
			"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow",
			"doom_loop": "allow",
		},
		"autoupdate": false,
		"share":      "disabled",
	}
	b, err := json.Marshal(cfg)
	return string(b), err
}

// Env is the environment every opencode process gets: config, key, and no calls home.
func Env(m Model) (map[string]string, error) {
	content, err := ConfigContent(m)
	if err != nil {
		return nil, err
	}
	env := map[string]string{
		"OPENCODE_CONFIG_CONTENT":       content,
		"OPENCODE_DISABLE_MODELS_FETCH": "true",
		"OPENCODE_DISABLE_AUTOUPDATE":   "true",
		"OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
	}
	if m.APIKey != "" {
		env[ModelKeyEnv] = m.APIKey
	}
	return env, nil
}

// Password derives the server password of one sandbox from the service secret: nothing extra is
// stored, a bot restart derives the same one, and a leaked password opens one sandbox only.
func Password(secret, sandboxID string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("threadbox/opencode/" + sandboxID))
	return hex.EncodeToString(mac.Sum(nil))
}
