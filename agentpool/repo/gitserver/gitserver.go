// Package gitserver is a git forge for tests: `git http-backend` behind net/http/cgi on loopback,
// serving bare repositories that need a token (HTTP Basic, any user, the token as password), as
// GitHub does. It records requests and can be told to refuse pushes or to fail fetches.
package gitserver

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Server is the forge.
type Server struct {
	root  string
	token string
	srv   *httptest.Server

	// mu protects the following.
	mu         sync.Mutex
	rejectPush bool
	failFetch  bool
	requests   []string
	unauthed   int
}

// New starts a server holding no repositories; it stops when t ends.
func New(t testing.TB, token string) *Server {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	s := &Server{root: t.TempDir(), token: token}
	backend := &cgi.Handler{
		Path: gitPath, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + s.root},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.mu.Lock()
			s.unauthed++
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="gitserver"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		reject, fail := s.rejectPush, s.failFetch
		s.mu.Unlock()
		if fail && (strings.HasSuffix(r.URL.Path, "/git-upload-pack") || r.URL.Query().Get("service") == "git-upload-pack") {
			http.Error(w, "the forge is having a bad day", http.StatusServiceUnavailable)
			return
		}
		if reject && (strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack") {
			http.Error(w, "pushes are refused here", http.StatusForbidden)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	raw, ok := strings.CutPrefix(h, "Basic ")
	if !ok {
		return false
	}
	dec, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return false
	}
	_, pass, _ := strings.Cut(string(dec), ":")
	return pass == s.token
}

// URL is the base URL (repositories are at URL/owner/name.git).
func (s *Server) URL() string { return s.srv.URL }

// Path is a repository's bare directory on disk.
func (s *Server) Path(owner, name string) string { return filepath.Join(s.root, owner, name+".git") }

// RejectPushes makes receive-pack answer 403 (a protected branch, a pre-receive hook saying no).
func (s *Server) RejectPushes(on bool) {
	s.mu.Lock()
	s.rejectPush = on
	s.mu.Unlock()
}

// FailFetches makes upload-pack (clone, fetch) answer 503, as a forge in an outage does.
func (s *Server) FailFetches(on bool) {
	s.mu.Lock()
	s.failFetch = on
	s.mu.Unlock()
}

// Requests returns the authorized requests received, oldest first.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Unauthorized counts requests refused for a missing or wrong token.
func (s *Server) Unauthorized() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unauthed
}

// CreateRepo makes owner/name with one commit on main holding files.
func (s *Server) CreateRepo(t testing.TB, owner, name string, files map[string][]byte) string {
	t.Helper()
	bare := s.Path(owner, name)
	run(t, "", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	run(t, bare, "config", "http.receivepack", "true")
	work := t.TempDir()
	run(t, "", "init", "--quiet", "--initial-branch=main", work)
	for p, data := range files {
		full := filepath.Join(work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, work, "add", "-A")
	run(t, work, "commit", "--quiet", "-m", "initial")
	run(t, work, "push", "--quiet", bare, "main")
	return s.Head(t, owner, name, "main")
}

// Head is a branch's commit ("" if it does not exist).
func (s *Server) Head(t testing.TB, owner, name, branch string) string {
	t.Helper()
	out, err := gitCmd(s.Path(owner, name), "rev-parse", "--verify", "--quiet", "refs/heads/"+branch).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Git runs git in a repository's bare directory and returns its output (for assertions).
func (s *Server) Git(t testing.TB, owner, name string, args ...string) string {
	t.Helper()
	return run(t, s.Path(owner, name), args...)
}

func run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitCmd(dir, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func gitCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	return cmd
}

// String is for failure messages.
func (s *Server) String() string { return fmt.Sprintf("gitserver at %s", s.srv.URL) }
