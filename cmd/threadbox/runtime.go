package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/claudecode"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/sandboxagent"
	"github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/cmd/threadbox/logging"
)

// Model keys, read from the bot's environment only. They reach the runtime process when it is
// launched, never the sandbox environment (sandbox.DefaultBlocked lists them) and never the logs.
const (
	anthropicKeyEnv = "ANTHROPIC_API_KEY"
	openAIKeyEnv    = "OPENAI_API_KEY"
)

// runtimeName resolves runtime.name "auto".
func (m *Main) runtimeName() string {
	name := m.Config.Runtime.Name
	if name != "auto" {
		return name
	}
	switch {
	case m.getenv(anthropicKeyEnv) != "":
		return claudecode.Name
	case m.getenv(openAIKeyEnv) != "":
		return opencode.Name
	}
	return "shell"
}

// runtimeNames are the enabled runtimes (runtime.enabled), the default (runtime.name, "auto"
// resolved) first.
func (m *Main) runtimeNames() []string {
	names := m.Config.Runtime.EnabledRuntimes()
	names[0] = m.runtimeName()
	return names
}

// aiRuntime is the first enabled runtime that calls a model (not shell), "" when there is none: the
// gateway, the egress default and the doctor's key checks are for it.
func (m *Main) aiRuntime() string {
	for _, n := range m.runtimeNames() {
		if n != "shell" {
			return n
		}
	}
	return ""
}

// newRuntimes builds every enabled runtime, the default first. wrap is applied to each (the model
// gateway's per-sandbox tokens); nil leaves them as they are.
func (m *Main) newRuntimes(gw *gateway.Gateway, wrap func(runtime.Runtime) runtime.Runtime) ([]runtime.Runtime, error) {
	var out []runtime.Runtime
	for i, name := range m.runtimeNames() {
		rt, err := m.newRuntime(gw, name)
		if err != nil {
			if i > 0 {
				err = fmt.Errorf("runtime.enabled %s: %w", name, err)
			}
			return nil, err
		}
		if wrap != nil {
			rt = wrap(rt)
		}
		out = append(out, rt)
	}
	return out, nil
}

// newRuntime builds the named agent runtime. With the gateway, the runtime calls the gateway's
// in-sandbox address with a placeholder key, and the real key stays here.
func (m *Main) newRuntime(gw *gateway.Gateway, name string) (runtime.Runtime, error) {
	if name == "shell" {
		return shell.New(), nil
	}
	model, err := m.modelFor(name)
	if err != nil {
		return nil, err
	}
	if gw != nil {
		model.APIKey = gatewayKey
		model.BaseURL = gw.LocalURL() + gateway.OpenAIPath
		if model.API == opencode.APIAnthropic {
			model.BaseURL = gw.LocalURL() + gateway.AnthropicPath + "/v1"
		}
	} else if m.networkMode() != "full" && m.Config.Sandbox.Provider != "local" {
		m.Logger.Warn("the AI runtime needs to reach its model API, but the gateway is off and sandbox.network is "+m.networkMode()+
			"; set gateway.enabled: true (or put the API's host on sandbox.egress.allow, or sandbox.network: full)",
			zap.String("runtime", name))
	}
	switch name {
	case claudecode.Name:
		if model.API != opencode.APIAnthropic {
			return nil, fmt.Errorf("runtime.name claude-code: needs %s (runtime.api anthropic)", anthropicKeyEnv)
		}
		return claudecode.New(claudecode.Config{Model: model.Name, BaseURL: strings.TrimSuffix(model.BaseURL, "/v1"), APIKey: model.APIKey}), nil
	}
	secret, err := m.runtimeSecret()
	if err != nil {
		return nil, err
	}
	switch name {
	case opencode.Name:
		return opencode.New(opencode.Config{Secret: secret, Model: model})
	case sandboxagent.Name:
		return sandboxagent.New(sandboxagent.Config{Secret: secret, Model: model})
	}
	return nil, fmt.Errorf("runtime %q: unknown", name)
}

// modelFor assembles the model settings of the named runtime: runtime.api/model/base_url plus the
// key from the environment.
func (m *Main) modelFor(rtName string) (opencode.Model, error) {
	cfg := m.Config.Runtime
	api := cfg.API
	if api == "" {
		api = opencode.APIAnthropic
		if m.getenv(anthropicKeyEnv) == "" && m.getenv(openAIKeyEnv) != "" {
			api = opencode.APIOpenAI
		}
	}
	keyEnv := openAIKeyEnv
	if api == opencode.APIAnthropic {
		keyEnv = anthropicKeyEnv
	}
	key := m.getenv(keyEnv)
	if key == "" {
		return opencode.Model{}, fmt.Errorf("runtime %s with runtime.api %s needs %s in the bot's environment", rtName, api, keyEnv)
	}
	name := cfg.Model
	if name == "" && rtName != claudecode.Name {
		// opencode and sandbox-agent need a model id; Claude Code picks its own.
		name = defaultModel(api)
	}
	return opencode.Model{API: api, Name: name, BaseURL: cfg.BaseURL, APIKey: key}, nil
}

// defaultModel is the model id opencode and sandbox-agent use when runtime.model is empty, so that a
// key alone is enough. openai-compatible servers have no common model: it must be set.
func defaultModel(api string) string {
	switch api {
	case opencode.APIAnthropic:
		return "claude-sonnet-4-5"
	case opencode.APIOpenAI:
		return "gpt-5"
	}
	return ""
}

// runtimeSecret is runtime.secret, or one generated once and kept next to the data. A kept one is
// then redacted as a configured one is: the log and admin replies were built before it was known.
func (m *Main) runtimeSecret() (string, error) {
	if s := m.Config.Runtime.Secret; s != "" {
		return s, nil
	}
	secret, err := m.keptRuntimeSecret()
	if err != nil {
		return "", err
	}
	m.Config.Runtime.Secret = secret // m.secrets() has it from now on, and this is not read again
	if m.Logger != nil {
		m.Logger = m.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return logging.NewRedactingCore(c, logging.SecretsToRedact([]string{secret}, m.Config.Public()))
		}))
	}
	return secret, nil
}

// keptRuntimeSecret reads the runtime secret kept next to the data, or generates and keeps one.
func (m *Main) keptRuntimeSecret() (string, error) {
	if err := m.Config.ValidateServe(); err != nil {
		return "", err // a secret kept on this machine would not match the other replicas'
	}
	dir := "data"
	if p, ok := strings.CutPrefix(m.Config.Database.URL, "sqlite:"); ok {
		dir = filepath.Dir(p)
	}
	path := filepath.Join(dir, "runtime.secret")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("runtime.secret: reading %s: %w", path, err)
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	secret := hex.EncodeToString(b[:])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("runtime.secret: %w", err)
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("runtime.secret: writing %s: %w", path, err)
	}
	m.Logger.Info("generated a runtime secret; set runtime.secret to share one between replicas", zap.String("file", path))
	return secret, nil
}
