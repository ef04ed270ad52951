package repo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/repo/gitserver"
)

// Two replicas (or two processes) sharing the cache directory both want a repository the cache
// does not have yet: the second waits for the first's clone and then uses it, instead of cloning
// too and failing the user's repo command on the rename.
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
	waited := make(chan struct{})
	b.onWait = func() { close(waited) }
	done := make(chan error, 1)
	go func() { done <- a.Fetch(t.Context(), spec) }()
	<-reached
	bDone := make(chan error, 1)
	go func() { bDone <- b.Fetch(t.Context(), spec) }()
	<-waited
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, <-bDone, "the second replica failed on the first one's clone")
	require.NoError(t, a.Fetch(t.Context(), spec), "and the cache serves both afterwards")
}

// Two replicas sharing the cache directory take turns on a repository's cache, as two operations
// in one process do: git's own ref locks make a fetch that meets another's fail ("cannot lock
// ref"), which the user would read as the forge failing.
func TestReplicasSharingTheCacheTakeTurns(t *testing.T) {
	srv := gitserver.New(t, "tok")
	srv.CreateRepo(t, "acme", "app", map[string][]byte{"README.md": []byte("hi\n")})
	cache := t.TempDir()
	replica := func() *Repos {
		r, err := New(Config{CacheDir: cache, Token: "tok", Hosts: map[string]string{"github.com": srv.URL()}, Allow: Allowlist{"github.com/acme"}})
		require.NoError(t, err)
		return r
	}
	a, b := replica(), replica()
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}
	waited := make(chan struct{})
	b.onWait = func() { close(waited) }

	unlock, err := a.lock(t.Context(), spec)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.Fetch(t.Context(), spec) }()
	select {
	case <-waited:
	case err := <-done:
		t.Fatalf("the second replica used the cache while the first held it (err %v)", err)
	}
	unlock()
	require.NoError(t, <-done)
}

// A replica that holds a repository's cache and hangs must not hang the other's turns for good: the
// wait for its lock ends with the waiter's context.
func TestCacheLockWaitEndsWithContext(t *testing.T) {
	cache := t.TempDir()
	replica := func() *Repos {
		r, err := New(Config{CacheDir: cache, Token: "tok", Allow: Allowlist{"github.com/acme"}})
		require.NoError(t, err)
		return r
	}
	a, b := replica(), replica()
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}
	unlock, err := a.lock(t.Context(), spec)
	require.NoError(t, err)
	defer unlock()

	ctx, cancel := context.WithCancel(t.Context())
	b.onWait = cancel // the other process holds it: give up
	_, err = b.lock(ctx, spec)
	require.ErrorIs(t, err, context.Canceled)

	// In one process too: the second operation's wait ends with its context.
	ctx2, cancel2 := context.WithCancel(t.Context())
	cancel2()
	_, err = a.lock(ctx2, spec)
	require.ErrorIs(t, err, context.Canceled)
}
