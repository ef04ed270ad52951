// Package githubfake is a fake of GitHub's REST pull-request API for tests: list, create and update
// pulls under /repos/{owner}/{repo}/pulls, with a bearer token, the error shapes GitHub uses
// (401 Bad credentials, 404 Not Found, 422 Validation Failed for a second open pull of one head),
// and a record of every call.
package githubfake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Call is one request as received.
type Call struct {
	Method, Path, Query string
	Body                map[string]any
}

// Pull is a pull request the fake holds.
type Pull struct {
	Owner, Repo       string
	Number            int
	Title, Body       string
	Head, Base, State string
}

// Server is the fake.
type Server struct {
	token string
	srv   *httptest.Server

	// mu protects the following.
	mu    sync.Mutex
	calls []Call
	pulls []*Pull
	repos map[string]bool
}

// New starts the fake, knowing the given owner/name repositories; it stops when t ends.
func New(t testing.TB, token string, repos ...string) *Server {
	s := &Server{token: token, repos: map[string]bool{}}
	for _, r := range repos {
		s.repos[r] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls", s.list)
	mux.HandleFunc("POST /repos/{owner}/{repo}/pulls", s.create)
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/pulls/{number}", s.update)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery}
		if r.Body != nil {
			_ = json.NewDecoder(r.Body).Decode(&c.Body)
		}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		s.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+s.token {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Bad credentials"})
			return
		}
		if parts := strings.Split(r.URL.Path, "/"); len(parts) < 4 || !s.repos[parts[2]+"/"+parts[3]] {
			writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
			return
		}
		mux.ServeHTTP(w, withBody(r, c.Body))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// bodyKey carries the decoded JSON body (read once, for the call record) to the method handlers.
type bodyKey struct{}

func withBody(r *http.Request, body map[string]any) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
}

func bodyOf(r *http.Request) map[string]any {
	m, _ := r.Context().Value(bodyKey{}).(map[string]any)
	return m
}

// URL is the API base (git.github_api_url).
func (s *Server) URL() string { return s.srv.URL }

// Calls returns the requests received, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Pulls returns copies of the pull requests.
func (s *Server) Pulls() []Pull {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Pull
	for _, p := range s.pulls {
		out = append(out, *p)
	}
	return out
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	owner, repo := r.PathValue("owner"), r.PathValue("repo")
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, p := range s.pulls {
		if p.Owner != owner || p.Repo != repo {
			continue
		}
		if st := q.Get("state"); st != "" && st != "all" && p.State != st {
			continue
		}
		if h := q.Get("head"); h != "" && h != owner+":"+p.Head {
			continue
		}
		if b := q.Get("base"); b != "" && b != p.Base {
			continue
		}
		out = append(out, s.wire(p))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	owner, repo := r.PathValue("owner"), r.PathValue("repo")
	b := bodyOf(r)
	title, _ := b["title"].(string)
	head, _ := b["head"].(string)
	base, _ := b["base"].(string)
	body, _ := b["body"].(string)
	if title == "" || head == "" || base == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pulls {
		if p.Owner == owner && p.Repo == repo && p.Head == head && p.Base == base && p.State == "open" {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
				"errors": []any{map[string]any{"message": fmt.Sprintf("A pull request already exists for %s:%s.", owner, head)}}})
			return
		}
	}
	p := &Pull{Owner: owner, Repo: repo, Number: len(s.pulls) + 1, Title: title, Body: body, Head: head, Base: base, State: "open"}
	s.pulls = append(s.pulls, p)
	writeJSON(w, http.StatusCreated, s.wire(p))
}

func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.PathValue("number"))
	b := bodyOf(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pulls {
		if p.Owner == r.PathValue("owner") && p.Repo == r.PathValue("repo") && p.Number == n {
			if v, ok := b["body"].(string); ok {
				p.Body = v
			}
			if v, ok := b["title"].(string); ok {
				p.Title = v
			}
			writeJSON(w, http.StatusOK, s.wire(p))
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
}

func (s *Server) wire(p *Pull) map[string]any {
	return map[string]any{
		"number": p.Number, "state": p.State, "title": p.Title, "body": p.Body,
		"html_url": fmt.Sprintf("https://github.example/%s/%s/pull/%d", p.Owner, p.Repo, p.Number),
		"head":     map[string]any{"ref": p.Head}, "base": map[string]any{"ref": p.Base},
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
