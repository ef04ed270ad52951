package repo

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/repo/gitserver"
)

// Two replicas (or two processes) sharing the cache directory both clone a repository the cache
// does not have yet: the one that finishes second finds the other's clone in place and uses it,
// instead of failing the user's repo command on the rename.
func TestColdCloneRaceWithAnotherReplica(t *testing.T) {
	srv := gitserver.New(t, "tok")
	srv.CreateRepo(t, "acme", "app", map[string][]byte{"README.md": []byte("hi\n")})
	target, err := url.Parse(srv.URL())
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(reached); <-release })
		proxy.ServeHTTP(w, r)
	}))
	defer slow.Close()

	cache := t.TempDir()
	replica := func(base string) *Repos {
		r, err := New(Config{CacheDir: cache, Token: "tok", Hosts: map[string]string{"github.com": base}, Allow: Allowlist{"github.com/acme"}})
		require.NoError(t, err)
		return r
	}
	a, b := replica(slow.URL), replica(srv.URL())
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}
	done := make(chan error, 1)
	go func() { done <- a.Fetch(t.Context(), spec) }()
	<-reached
	require.NoError(t, b.Fetch(t.Context(), spec))
	close(release)
	require.NoError(t, <-done, "the second clone to finish failed on the first one's cache")
	require.NoError(t, a.Fetch(t.Context(), spec), "and the cache serves both afterwards")
}
