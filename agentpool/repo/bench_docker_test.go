package repo_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/repo"
	"github.com/threadbox/threadbox/agentpool/repo/gitserver"
)

// benchRepoMB is the size of the benchmark repository's content (incompressible, so git cannot
// make it smaller than it is).
const benchRepoMB = 50

// BenchmarkReadySandboxRepo reports the time to ready a sandbox with a 50 MB repository: cold (the
// bot clones into an empty cache, then copies into the sandbox), from the cache (fetch, then copy),
// against a plain `git clone` of the same repository over the same loopback server. The issue's
// target: from the cache within 1.2 × the plain clone.
func BenchmarkReadySandboxRepo(b *testing.B) {
	token := "benchtoken" + randomHex(8)
	srv := gitserver.New(b, token)
	files := map[string][]byte{}
	for i := range benchRepoMB {
		data := make([]byte, 1<<20)
		_, _ = rand.Read(data)
		files[fmt.Sprintf("data/blob%02d.bin", i)] = data
	}
	srv.CreateRepo(b, "acme", "big", files)
	spec := repo.Spec{Host: "github.com", Owner: "acme", Name: "big"}
	cfg := func(cache string) repo.Config {
		return repo.Config{CacheDir: cache, Token: token, Hosts: map[string]string{"github.com": srv.URL()}, Allow: repo.Allowlist{"github.com/acme"}}
	}
	sb := gitSandbox(b)
	// Each run starts from an empty working directory, as a new thread's sandbox does.
	clean := func() { sh(b, sb, "find . -mindepth 1 -delete") }

	b.Run("plain-git-clone", func(b *testing.B) {
		basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
		for b.Loop() {
			dir, err := os.MkdirTemp("", "bench-clone-*")
			require.NoError(b, err)
			cmd := exec.CommandContext(b.Context(), "git", "clone", "--quiet", srv.URL()+"/acme/big.git", filepath.Join(dir, "w"))
			cmd.Env = append(os.Environ(), "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic "+basic)
			out, err := cmd.CombinedOutput()
			require.NoError(b, err, "%s", out)
			_ = os.RemoveAll(dir)
		}
	})
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			clean()
			cache, err := os.MkdirTemp("", "bench-cache-*")
			require.NoError(b, err)
			r, err := repo.New(cfg(cache))
			require.NoError(b, err)
			b.StartTimer()
			_, err = r.Prepare(b.Context(), sb, spec, repo.ThreadBranch("bench"), repo.Identity{Name: "b", Email: "b@example.com"})
			require.NoError(b, err)
			b.StopTimer()
			_ = os.RemoveAll(cache)
			b.StartTimer()
		}
	})
	b.Run("cached", func(b *testing.B) {
		cache := b.TempDir()
		r, err := repo.New(cfg(cache))
		require.NoError(b, err)
		_, err = r.Prepare(b.Context(), sb, spec, repo.ThreadBranch("bench"), repo.Identity{Name: "b", Email: "b@example.com"})
		require.NoError(b, err)
		for b.Loop() {
			b.StopTimer()
			clean()
			b.StartTimer()
			_, err := r.Prepare(b.Context(), sb, spec, repo.ThreadBranch("bench"), repo.Identity{Name: "b", Email: "b@example.com"})
			require.NoError(b, err)
		}
	})
}
