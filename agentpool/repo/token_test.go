package repo

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The token is the forge's (git.host): an allowlist that also names another host must not have
// git hand that host the token.
func TestTokenGoesOnlyToItsForge(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // host → Authorization headers it received
	server := func(host string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[host] = append(seen[host], r.Header.Get("Authorization"))
			mu.Unlock()
			http.NotFound(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	forge, other := server("github.com"), server("other.example")
	r, err := New(Config{
		CacheDir: t.TempDir(), Token: "sekrit-token", TokenHost: "github.com",
		Hosts: map[string]string{"github.com": forge.URL, "other.example": other.URL},
		Allow: Allowlist{"github.com/acme", "other.example/acme"},
	})
	require.NoError(t, err)
	for _, host := range []string{"github.com", "other.example"} {
		require.ErrorIs(t, r.Fetch(t.Context(), Spec{Host: host, Owner: "acme", Name: "app"}), ErrNotFound)
	}
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen["github.com"])
	for _, h := range seen["github.com"] {
		require.NotEmpty(t, h, "the forge gets the token")
	}
	require.NotEmpty(t, seen["other.example"])
	for _, h := range seen["other.example"] {
		require.Empty(t, h, "another allowed host got the forge's token")
	}
}
