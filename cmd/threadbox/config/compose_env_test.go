package config

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestComposeEnvFileIsIgnored: deploy/compose.yaml's instructions copy compose.env.example to
// deploy/.env and fill in the database password, HTTP token and runtime secret there, so git must
// ignore that file, or a `git add -A` commits the secrets.
func TestComposeEnvFileIsIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	root := filepath.Join("..", "..", "..")
	if err := exec.Command(git, "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not in a git checkout")
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
