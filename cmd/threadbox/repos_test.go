package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/repo"
	"github.com/threadbox/threadbox/agentpool/repo/gitserver"
	"github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// repoPool is a pool wired as serve wires it (newWorkspace from repos.* and git.*), on Docker with
// the git-carrying base image and the shell runtime, against a loopback git server.
type repoPool struct {
	pool  *agentpool.Pool
	srv   *gitserver.Server
	token string
}

func newRepoPool(t *testing.T, mod func(*config.Config)) repoPool {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	token := "tbtoken" + hex.EncodeToString(b[:])
	srv := gitserver.New(t, token)
	srv.CreateRepo(t, "acme", "app", map[string][]byte{"README.md": []byte("# app\n")})
	dep := "repowire-" + hex.EncodeToString(b[:4])
	log := zaptest.NewLogger(t)
	prov := dockertest.New(t, docker.Options{Deployment: dep, Logger: log})
	const image = "threadbox/sandbox-base:latest"
	sandboxtest.RequireService(t, "sandbox base image (make sandbox-image)", prov.CheckImage(t.Context(), image))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, _ := prov.List(ctx, map[string]string{sandbox.LabelDeployment: dep})
		for _, i := range list {
			_ = prov.Destroy(ctx, i.Handle)
		}
	})
	cfg := config.Default()
	cfg.Repos.Default = "acme/app"
	cfg.Repos.Allow = []string{"github.com/acme"}
	cfg.Repos.CacheDir = t.TempDir()
	cfg.Git.Token, cfg.Git.URL = token, srv.URL()
	if mod != nil {
		mod(&cfg)
	}
	ws, err := newWorkspace(cfg)
	require.NoError(t, err)
	pool, err := agentpool.New(agentpool.Config{Deployment: dep, Image: image,
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 256, ExecTimeout: 10 * time.Minute},
	}, agentpool.Deps{Store: dbtest.OpenSQLite(t), Provider: prov, Runtime: shell.New(), Logger: log, Workspace: ws})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	return repoPool{pool: pool, srv: srv, token: token}
}

// turn runs one message on the thread and returns its outcome.
func (p repoPool) turn(t *testing.T, thread, channel, event, text string) agentpool.Outcome {
	t.Helper()
	got := make(chan agentpool.Outcome, 1)
	_, err := p.pool.Submit(t.Context(), agentpool.Request{ThreadKey: thread, Platform: "web", ChannelID: channel, UserID: "u",
		EventID: event, Text: text, Sink: agentpool.SinkFuncs{DeliverFunc: func(_ context.Context, out agentpool.Outcome) ([]string, error) {
			got <- out
			return nil, nil
		}}})
	require.NoError(t, err)
	select {
	case out := <-got:
		return out
	case <-time.After(2 * time.Minute):
		t.Fatal("no outcome")
		return agentpool.Outcome{}
	}
}

// TestThreadGetsTheConfiguredRepository: with repos.default set, a thread's first turn runs in the
// repository's working tree on threadbox/<thread>, says so once, and no trace of the token is in
// the sandbox; a repository off the allowlist, or one that does not exist, gets a clear reply, and
// the thread keeps working once the configuration is right for it.
func TestThreadGetsTheConfiguredRepository(t *testing.T) {
	t.Parallel()
	p := newRepoPool(t, func(c *config.Config) {
		c.Repos.Channels = map[string]string{"C-off": "other/app", "C-nope": "acme/nope"}
	})
	branch := repo.ThreadBranch("web:repo-thread")

	out := p.turn(t, "web:repo-thread", "C1", "e1", "git rev-parse --abbrev-ref HEAD; cat README.md; git remote get-url origin")
	require.NoError(t, out.Err)
	require.Contains(t, out.Answer, branch)
	require.Contains(t, out.Answer, "# app")
	require.Contains(t, out.Answer, p.srv.URL()+"/acme/app.git")
	require.Contains(t, out.Workspace, "Checked out github.com/acme/app (main at ")
	require.Contains(t, out.Workspace, "on branch "+branch)

	out = p.turn(t, "web:repo-thread", "C1", "e2", "env; cat .git/config; grep -r -l -F '"+p.token+"' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null; echo scanned")
	require.NoError(t, out.Err)
	require.Contains(t, out.Answer, "scanned")
	require.NotContains(t, out.Answer, p.token, "the token is nowhere in the sandbox")
	require.Empty(t, out.Workspace, "said once, on the turn that checked it out")

	tests := []struct {
		channel, want string
	}{
		{"C-off", "github.com/other/app is not on this bot's list of allowed repositories"},
		{"C-nope", "I could not find github.com/acme/nope"},
	}
	for _, tc := range tests {
		out := p.turn(t, "web:bad-"+tc.channel, tc.channel, "bad-"+tc.channel, "echo hi")
		require.Error(t, out.Err)
		text := bot.Explain(nil, "turn failed", out.Err).String()
		require.True(t, strings.HasPrefix(text, tc.want), text)
		require.NotContains(t, text, p.token)
	}
	again := p.turn(t, "web:repo-thread", "C1", "e3", "echo still working")
	require.NoError(t, again.Err)
	require.Contains(t, again.Answer, "still working")
}
