package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/cmd/threadbox/logging"
)

// wrapped marks a runtime that went through newRuntimes' wrap (the gateway's, in serve).
type wrapped struct{ runtime.Runtime }

// TestNewRuntimesBuildsEveryEnabledRuntime: runtime.enabled builds each runtime, the default first,
// and each one gets the wrap (so every enabled AI runtime goes through the model gateway).
func TestNewRuntimesBuildsEveryEnabledRuntime(t *testing.T) {
	m := &Main{Config: config.Loaded{Config: config.Default()}, Logger: zaptest.NewLogger(t),
		Environ: []string{"ANTHROPIC_API_KEY=sk-not-real"}}
	m.Config.Runtime.Name, m.Config.Runtime.Enabled = "opencode", []string{"claude-code", "shell", "opencode"}
	m.Config.Runtime.Secret = "0123456789abcdef0123456789abcdef"
	m.Config.Sandbox.Network = "full" // no gateway here: no warning about reaching the model API
	require.NoError(t, m.Config.Validate())

	var seen []string
	rts, err := m.newRuntimes(nil, func(rt runtime.Runtime) runtime.Runtime {
		seen = append(seen, rt.Name())
		return wrapped{rt}
	})
	require.NoError(t, err)
	require.Equal(t, []string{"opencode", "claude-code", "shell"}, seen, "the default first, every one wrapped")
	for _, rt := range rts {
		require.IsType(t, wrapped{}, rt)
	}
	require.Equal(t, "opencode", m.aiRuntime())
	require.False(t, m.readOnlyRoot(), "one spec serves them all, and the AI runtimes need a writable home")
}

// TestEnabledRuntimesDriveTheGatewayAndRoot: with shell the default and an AI runtime enabled too,
// the AI runtime decides the network (the gateway's restricted mode) and the root filesystem; an
// enabled runtime that cannot be built names runtime.enabled.
func TestEnabledRuntimesDriveTheGatewayAndRoot(t *testing.T) {
	m := &Main{Config: config.Loaded{Config: config.Default()}, Logger: zaptest.NewLogger(t)}
	m.Config.Runtime.Name = "shell"
	m.Config.Sandbox.Provider = "docker"
	require.Equal(t, "", m.aiRuntime())
	require.Equal(t, "none", m.networkMode())
	require.True(t, m.readOnlyRoot())

	m.Config.Runtime.Enabled = []string{"shell", "claude-code"}
	require.Equal(t, "claude-code", m.aiRuntime())
	require.Equal(t, "restricted", m.networkMode())
	require.False(t, m.readOnlyRoot())
	_, err := m.newRuntimes(nil, nil)
	require.ErrorContains(t, err, "runtime.enabled claude-code: runtime claude-code with runtime.api anthropic needs ANTHROPIC_API_KEY")
}

// TestKeptRuntimeSecretIsRedacted: with no runtime.secret configured, the secret generated and kept
// next to the data (and the one read back from there by the next start) is redacted like a
// configured one, in the log written after it is known and in admin replies; before, the log and the
// redaction were built from the configuration alone, so it was printed wherever it appeared.
func TestKeptRuntimeSecretIsRedacted(t *testing.T) {
	dir := t.TempDir()
	for _, start := range []string{"generated", "read back"} {
		t.Run(start, func(t *testing.T) {
			var out bytes.Buffer
			logger, err := logging.New(&out, logging.Options{Format: "json"})
			require.NoError(t, err)
			m := &Main{Config: config.Loaded{Config: config.Default()}, Logger: logger}
			m.Config.Database.URL = "sqlite:" + filepath.Join(dir, "threadbox.db")
			secret, err := m.runtimeSecret()
			require.NoError(t, err)
			require.Len(t, secret, 64)
			kept, err := os.ReadFile(filepath.Join(dir, "runtime.secret"))
			require.NoError(t, err)
			require.Equal(t, secret, strings.TrimSpace(string(kept)))

			m.Logger.Info("auth failed for "+secret, zap.String("header", "Basic "+secret))
			require.NotContains(t, out.String(), secret)
			require.Contains(t, out.String(), logging.Redacted)
			require.Equal(t, "token "+logging.Redacted, m.redactor()("token "+secret))
			again, err := m.runtimeSecret()
			require.NoError(t, err)
			require.Equal(t, secret, again)
		})
	}
}
