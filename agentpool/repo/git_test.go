package repo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// Git's words decide whether a choice was wrong (not found) or the forge failed (try later); the
// URL, port and path git quotes in its message must not decide it.
func TestNotFoundReadsGitsWordsNotItsQuotes(t *testing.T) {
	for _, tc := range []struct {
		name, stderr string
		want         bool
	}{
		{"http 404", "fatal: unable to access 'https://forge.example/acme/x.git/': The requested URL returned error: 404", true},
		{"github private or missing", "remote: Repository not found.\nfatal: repository 'https://github.com/acme/x.git/' not found", true},
		{"local path", "fatal: '/srv/git/acme/x.git' does not appear to be a git repository", true},
		{"branch", "warning: Could not find remote branch nope to clone.\nfatal: Remote branch nope not found in upstream origin", true},
		{"ref", "fatal: couldn't find remote ref refs/heads/nope", true},
		{"503 on a port with 404 in it", "remote: the forge is having a bad day\nfatal: unable to access 'http://127.0.0.1:40405/acme/flaky.git/': The requested URL returned error: 503", false},
		{"503 on a repository named 404", "fatal: unable to access 'https://forge.example/acme/issue-404.git/': The requested URL returned error: 503", false},
		{"a repository named not found", "fatal: unable to access 'https://forge.example/acme/not found.git/': Could not resolve host: forge.example", false},
		{"apostrophe then a quote", "fatal: couldn't find remote ref nope in 'https://forge.example/acme/x.git'", true},
		{"an unclosed quote", "fatal: unable to access 'https://forge.example/acme/x.git/\nremote: Repository not found.", true},
		{"auth", "fatal: Authentication failed for 'https://forge.example/acme/x.git/'", false},
		{"timeout", "fatal: unable to access 'https://forge.example/acme/x.git/': Failed to connect to forge.example port 443 after 130000 ms: Connection timed out", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := &gitError{args: []string{"clone"}, stderr: tc.stderr, err: errors.New("exit status 128")}
			if got := notFound(err); got != tc.want {
				t.Fatalf("notFound(%q) = %v, want %v", tc.stderr, got, tc.want)
			}
		})
	}
}

// A forge's words reach errors, logs and notFound: a hostile one that floods stderr (remote: lines
// from its hooks) with bytes that are not UTF-8 must neither fill the bot's memory nor put invalid
// text in an error.
func TestRunBoundsHostileStderr(t *testing.T) {
	dir := t.TempDir()
	bare := filepath.Join(dir, "forge.git")
	g := git{}
	if _, err := g.run(t.Context(), "", "init", "--quiet", "--bare", bare); err != nil {
		t.Fatal(err)
	}
	hook := "#!/bin/sh\nhead -c 8388608 /dev/zero | tr '\\000' '\\377'\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bare, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	for _, args := range [][]string{{"init", "--quiet", work}, {"-C", work, "commit", "--quiet", "--allow-empty", "-m", "x"}} {
		if _, err := g.run(t.Context(), "", args...); err != nil {
			t.Fatal(err)
		}
	}
	_, err := g.run(t.Context(), work, "push", "--quiet", bare, "HEAD:refs/heads/main")
	if err == nil {
		t.Fatal("push past a refusing hook succeeded")
	}
	text := err.Error()
	if len(text) > 64<<10 {
		t.Errorf("error is %d bytes, want it bounded", len(text))
	}
	if !strings.Contains(text, "failed to push") {
		t.Errorf("git's verdict, which comes last, was lost: %q", text[max(0, len(text)-300):])
	}
	if !utf8.ValidString(text) {
		t.Errorf("error is not valid UTF-8: %q", text[:min(len(text), 200)])
	}
}

// TestGitIgnoresTheBotUsersConfig: git on the bot's side reads no global or XDG config (a
// credential helper, an insteadOf rewrite or a filter there would apply to forge traffic) and
// speaks only http(s) and local paths.
func TestGitIgnoresTheBotUsersConfig(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	if err := os.MkdirAll(filepath.Join(home, ".config", "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(home, ".gitconfig"), filepath.Join(home, ".config", "git", "config")} {
		if err := os.WriteFile(f, []byte("[credential]\n\thelper = !echo leaked\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := (git{}).run(t.Context(), "", "config", "--get-all", "credential.helper"); err == nil {
		t.Fatalf("the bot user's credential.helper was read: %q", out)
	}
	// git:// on a loopback port nothing listens on: refused by policy before any connection.
	_, err := (git{}).run(t.Context(), "", "ls-remote", "git://127.0.0.1:1/x")
	if err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("git:// was not refused by policy: %v", err)
	}
}
