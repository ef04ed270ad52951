package config

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/threadbox/threadbox/sandbox/sandboxtest"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestComposeEnvFileIsIgnored: deploy/compose.yaml's instructions copy compose.env.example to
// deploy/.env and fill in the database password, HTTP token and runtime secret there, so git must
// ignore that file, or a `git add -A` commits the secrets.
func TestComposeEnvFileIsIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		sandboxtest.RequireService(t, "git", err)
	}
	root := filepath.Join("..", "..", "..")
	if err := exec.Command(git, "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		sandboxtest.RequireService(t, "a git checkout", err)
	}
	err = exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", "deploy/.env").Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		t.Fatal("deploy/.env (compose's secrets, per compose.env.example) is not ignored by .gitignore")
	}
	if err != nil {
		t.Fatalf("git check-ignore: %v", err)
	}
}

// TestComposeDefaultsAreTheEmbeddedOnes: compose.yaml passes some keys as ${VAR:-default}; its
// defaults must be the code's, or a compose deployment quietly runs otherwise than the README says
// (sandbox.network none instead of auto kept AI runtimes on Docker from restricted egress).
func TestComposeDefaultsAreTheEmbeddedOnes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "compose.yaml"))
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	env := doc.Services["bot"].Environment
	def := Default()
	defaultOf := regexp.MustCompile(`^\$\{[A-Z_]+:-([^}]*)\}$`)
	for _, tc := range []struct{ env, want string }{
		{"THREADBOX_DEPLOYMENT", def.Deployment},
		{"THREADBOX_RUNTIME_NAME", def.Runtime.Name},
		{"THREADBOX_SANDBOX_IMAGE", def.Sandbox.Image},
		{"THREADBOX_SANDBOX_NETWORK", def.Sandbox.Network},
	} {
		t.Run(tc.env, func(t *testing.T) {
			m := defaultOf.FindStringSubmatch(env[tc.env])
			require.NotNil(t, m, "compose.yaml's bot sets %s to %q, not ${VAR:-default}", tc.env, env[tc.env])
			require.Equal(t, tc.want, m[1], "compose.yaml's default for %s", tc.env)
		})
	}
}
