package bot

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCommandForms: only a command's exact forms are commands; an ordinary sentence that starts with
// a command word ("use pnpm", "runtime error") is a request for the agent.
func TestCommandForms(t *testing.T) {
	providers, runtimes := []string{"docker", "kvm"}, []string{"claude-code", "codex"}
	for _, tc := range []struct {
		text         string
		use, runtime bool
	}{
		{text: "use", use: true},
		{text: "use docker", use: true},
		{text: "use kvm", use: true},     // enabled here
		{text: "use daytona", use: true}, // a provider this deployment does not enable: told so
		{text: "use pnpm"},               // a request: "use pnpm" for the project
		{text: "use tabs"},
		{text: "use docker compose for it"},
		{text: "user docker"},
		{text: "runtime", runtime: true},
		{text: "runtime codex", runtime: true},
		{text: "runtime opencode", runtime: true}, // known, not enabled: told so
		{text: "runtime error"},
		{text: "runtime panics"},
		{text: "runtime error in main.go"},
		{text: "runtimes shell"},
	} {
		require.Equal(t, tc.use, isUse(tc.text, providers), "isUse(%q)", tc.text)
		require.Equal(t, tc.runtime, isRuntime(tc.text, runtimes), "isRuntime(%q)", tc.text)
	}
}
