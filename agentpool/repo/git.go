package repo

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// git runs git on the bot's side. The token travels in the environment as an http.extraHeader
// (GIT_CONFIG_COUNT…, git 2.31+): never on a command line (ps shows those), never in a config file
// or a remote URL, so nothing written to disk, and so nothing copied into a sandbox, holds it.
type git struct {
	// token authenticates to the forge over HTTPS ("" for none).
	token string
	// tokenURL is the forge's base URL: git sends the token to URLs under it only ("" for any).
	tokenURL string
}

// run runs git with args in dir ("" for the current one) and returns stdout. Errors carry git's
// stderr with the token scrubbed.
func (g git) run(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = g.env()
	// git leaves the network to helpers (git-remote-https, upload-pack over ssh) that inherit its
	// pipes: cancelling kills the whole process group, and Wait stops waiting for pipes some
	// straggler still holds, so a forge that stalls cannot hang a cancelled clone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout bytes.Buffer
	capped := sandbox.NewCappedWriter(&stdout, maxStdout)
	stderr := &tailWriter{max: maxStderr}
	cmd.Stdout, cmd.Stderr = capped, stderr
	err := cmd.Run()
	if err == nil && capped.Truncated() {
		err = errStdoutTooLarge
	}
	if err != nil {
		text := strings.ToValidUTF8(strings.TrimSpace(stderr.String()), "\uFFFD")
		return stdout.Bytes(), &gitError{args: args, stderr: g.scrub(text), err: err}
	}
	return stdout.Bytes(), nil
}

// maxStdout bounds what is kept of git's stdout: the bot's commands print a few lines, but one
// reads a bundle the sandbox wrote (list-heads), whose header may list any number of refs.
const maxStdout = 1 << 20

var errStdoutTooLarge = fmt.Errorf("output over %d bytes", maxStdout)

// maxStderr bounds what is kept of git's stderr: a forge writes into it (remote: lines), and it
// ends up in errors and logs.
const maxStderr = 16 << 10

// tailWriter keeps the last lines of what is written, within max bytes: git's verdict (fatal: …)
// comes last. A line cut at the front is dropped whole, so no cut leaves half a token that scrub
// would then miss.
type tailWriter struct {
	max  int
	buf  []byte
	lost bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*w.max {
		w.trim()
	}
	return len(p), nil
}

func (w *tailWriter) trim() {
	if len(w.buf) <= w.max {
		return
	}
	keep := w.buf[len(w.buf)-w.max:]
	if i := bytes.IndexByte(keep, '\n'); i >= 0 {
		keep = keep[i+1:]
	} else {
		keep = nil
	}
	w.buf, w.lost = append(w.buf[:0], keep...), true
}

func (w *tailWriter) String() string {
	w.trim()
	if w.lost {
		return "[…]\n" + string(w.buf)
	}
	return string(w.buf)
}

// env is the bot's environment minus anything that would prompt or pick up a user's config, plus
// the token header.
func (g git) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	// No system, global or XDG config: a credential helper, an insteadOf rewrite or a filter there
	// would apply to forge traffic. Only http(s) to the forge, and local paths (the cache, bundles).
	env = append(env, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_ALLOW_PROTOCOL=http:https:file",
		"GIT_AUTHOR_NAME=threadbox", "GIT_AUTHOR_EMAIL=threadbox@localhost",
		"GIT_COMMITTER_NAME=threadbox", "GIT_COMMITTER_EMAIL=threadbox@localhost")
	if g.token != "" {
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + g.token))
		key := "http.extraHeader"
		if g.tokenURL != "" {
			key = "http." + g.tokenURL + "/.extraHeader"
		}
		env = append(env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0="+key,
			"GIT_CONFIG_VALUE_0=Authorization: Basic "+basic)
	}
	return env
}

func (g git) scrub(s string) string {
	if g.token == "" {
		return s
	}
	s = strings.ReplaceAll(s, g.token, "[token]")
	return strings.ReplaceAll(s, base64.StdEncoding.EncodeToString([]byte("x-access-token:"+g.token)), "[token]")
}

// gitError is a failed git command; its text is for operators (the bot words it for users).
type gitError struct {
	args   []string
	stderr string
	err    error
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.args, " "), e.err, e.stderr)
}

func (e *gitError) Unwrap() error { return e.err }

// notFound reports whether git's words say the repository or branch does not exist (or the token
// may not see it: forges answer 404 for private repositories).
func notFound(err error) bool {
	ge, ok := err.(*gitError)
	if !ok {
		return false
	}
	s := strings.ToLower(unquoted(ge.stderr))
	for _, w := range []string{"not found", "error: 404", "does not appear to be a git repository", "remote branch", "couldn't find remote ref"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// unquoted drops what git puts in single quotes (URLs, paths): a port like 40405 or a repository
// named issue-404 is not the forge saying 404. A quote opens only after a non-letter, so the
// apostrophe in "couldn't" does not swallow the words after it; quotes do not span lines.
func unquoted(s string) string {
	var b strings.Builder
	open := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\n':
			if open >= 0 {
				b.WriteString(s[open:i])
				open = -1
			}
			b.WriteByte(c)
		case open >= 0:
			if c == '\'' {
				open = -1
			}
		case c == '\'' && (i == 0 || !isLetter(s[i-1])):
			open = i
		default:
			b.WriteByte(c)
		}
	}
	if open >= 0 {
		b.WriteString(s[open:])
	}
	return b.String()
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
