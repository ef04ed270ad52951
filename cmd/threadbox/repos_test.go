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
	"github.com/threadbox/threadbox/agentpool/repo/githubfake"
	"github.com/threadbox/threadbox/agentpool/repo/gitserver"
	"github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/db"
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
	prov  *docker.Provider
	srv   *gitserver.Server
	gh    *githubfake.Server
	token string
	store db.Store
	// userName is the requesting user's name the turns carry.
	userName string
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
	gh := githubfake.New(t, token, "acme/app", "acme/lib")
	cfg.Git.Token, cfg.Git.URL, cfg.Git.GitHubAPIURL = token, srv.URL(), gh.URL()
	if mod != nil {
		mod(&cfg)
	}
	store := dbtest.OpenSQLite(t)
	ws, err := newWorkspace(cfg, store, log)
	require.NoError(t, err)
	pool, err := agentpool.New(agentpool.Config{Deployment: dep, Image: image,
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 256, ExecTimeout: 10 * time.Minute},
	}, agentpool.Deps{Store: store, Provider: prov, Runtime: shell.New(), Logger: log, Workspace: ws})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	return repoPool{pool: pool, prov: prov, srv: srv, gh: gh, token: token, store: store}
}

// turn runs one message on the thread and returns its outcome.
func (p repoPool) turn(t *testing.T, thread, channel, event, text string) agentpool.Outcome {
	t.Helper()
	got := make(chan agentpool.Outcome, 1)
	_, err := p.pool.Submit(t.Context(), agentpool.Request{ThreadKey: thread, Platform: "web", ChannelID: channel, UserID: "u", UserName: p.userName,
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

// TestPushOpensThenUpdatesThePullRequest: the shell runtime commits in the thread's sandbox; push
// delivers the branch to the git server and opens a pull request on the fake; a second push updates
// it; nothing new, or a refused push, gets a clear reply and the thread keeps working; and once the
// sandbox is removed out of band, the next turn finds the pushed work back and says so.
func TestPushOpensThenUpdatesThePullRequest(t *testing.T) {
	t.Parallel()
	p := newRepoPool(t, nil)
	p.userName = "Ada Lovelace"
	const thread = "web:push-thread"
	branch := repo.ThreadBranch(thread)
	explain := func(err error) string { return bot.Explain(nil, "push failed", err).String() }

	require.NoError(t, p.turn(t, thread, "C1", "e1", "echo fixed >> README.md && git commit -q -am 'fix the readme'").Err)
	note, err := p.pool.Push(t.Context(), thread)
	require.NoError(t, err)
	require.Contains(t, note, "to "+branch+" (fix the readme). Opened pull request #1: https://github.example/acme/app/pull/1")
	first := p.srv.Head(t, "acme", "app", branch)
	require.NotEmpty(t, first)
	require.Equal(t, "Ada Lovelace <threadbox@users.noreply.github.com>", strings.TrimSpace(p.srv.Git(t, "acme", "app", "log", "-1", "--format=%an <%ae>", branch)))
	pulls := p.gh.Pulls()
	require.Len(t, pulls, 1)
	require.Equal(t, branch, pulls[0].Head)
	require.Equal(t, "main", pulls[0].Base)
	require.Equal(t, "Threadbox: fix the readme", pulls[0].Title)

	_, err = p.pool.Push(t.Context(), thread)
	require.ErrorIs(t, err, repo.ErrNothingToPush)
	require.Equal(t, "There is nothing new to push: commit the change on the thread's branch first.", explain(err)[:len("There is nothing new to push: commit the change on the thread's branch first.")])

	require.NoError(t, p.turn(t, thread, "C1", "e2", "echo more >> README.md && git commit -q -am 'more'").Err)
	p.srv.RejectPushes(true)
	_, err = p.pool.Push(t.Context(), thread)
	require.ErrorIs(t, err, repo.ErrPushRejected)
	require.Contains(t, explain(err), "github.com/acme/app refused the push")
	require.NotContains(t, explain(err), p.token)
	p.srv.RejectPushes(false)
	require.NoError(t, p.turn(t, thread, "C1", "e3", "echo still working").Err, "the thread keeps working")
	note, err = p.pool.Push(t.Context(), thread)
	require.NoError(t, err)
	require.Contains(t, note, "Updated pull request #1")
	require.Len(t, p.gh.Pulls(), 1, "the same pull request, updated")
	second := p.srv.Head(t, "acme", "app", branch)
	require.NotEqual(t, first, second)
	require.Equal(t, "Repository: github.com/acme/app, branch "+branch+", last pushed "+second[:12],
		p.pool.DescribeWorkspace(t.Context(), agentpool.WorkspaceThread{ThreadKey: thread, ChannelID: "C1"}), "status shows it")
	require.Equal(t, "Repository: github.com/acme/app, branch "+repo.ThreadBranch("web:other")+", not pushed yet",
		p.pool.DescribeWorkspace(t.Context(), agentpool.WorkspaceThread{ThreadKey: "web:other", ChannelID: "C1"}))

	// docker rm -f of the sandbox: the next turn gets a new one, with the pushed work back.
	require.NoError(t, p.turn(t, thread, "C1", "e4", "echo unpushed >> README.md && git commit -q -am unpushed").Err)
	list, err := p.prov.List(t.Context(), nil)
	require.NoError(t, err)
	for _, info := range list {
		if info.Labels[sandbox.LabelThread] == thread {
			require.NoError(t, p.prov.Destroy(t.Context(), info.Handle))
		}
	}
	out := p.turn(t, thread, "C1", "e5", "git log -1 --format=%H; cat README.md")
	require.NoError(t, out.Err)
	require.Contains(t, out.Workspace, "restored from its last push")
	require.Contains(t, out.Answer, second)
	require.Contains(t, out.Answer, "# app\nfixed\nmore")
	require.NotContains(t, out.Answer, "unpushed", "what was not pushed is gone, as the reply said")
}

// move runs the repo command's move on the pool and waits for its outcome.
func (p repoPool) move(t *testing.T, thread, choice string, force bool) (agentpool.MoveResult, error) {
	t.Helper()
	type outcome struct {
		res agentpool.MoveResult
		err error
	}
	got := make(chan outcome, 1)
	require.NoError(t, p.pool.Move(agentpool.MoveRequest{
		Thread: agentpool.WorkspaceThread{ThreadKey: thread, Platform: "web", ChannelID: "C1", UserID: "u"}, Choice: choice, Force: force,
	}, func(res agentpool.MoveResult, err error) { got <- outcome{res, err} }))
	select {
	case o := <-got:
		return o.res, o.err
	case <-time.After(2 * time.Minute):
		t.Fatal("no move outcome")
		return agentpool.MoveResult{}, nil
	}
}

// TestRepoCommandChoosesThenMovesTheThread: with no default, "repo" before the first turn records
// the thread's repository (durably: a workspace built again over the same store sees it); later it
// moves the thread, refusing while commits are not pushed unless forced; bad choices get clear
// words and change nothing.
func TestRepoCommandChoosesThenMovesTheThread(t *testing.T) {
	t.Parallel()
	p := newRepoPool(t, func(c *config.Config) { c.Repos.Default = "" })
	p.srv.CreateRepo(t, "acme", "lib", map[string][]byte{"LIB.md": []byte("# lib\n")})
	const thread = "web:move-thread"
	branch := repo.ThreadBranch(thread)
	explain := func(err error) string { return bot.Explain(nil, "repo failed", err).String() }

	// No repository yet: the sandbox starts empty.
	out := p.turn(t, thread, "C1", "e0", "ls -A | grep -c . || true")
	require.NoError(t, out.Err)
	require.Empty(t, out.Workspace)
	// (A thread with a sandbox but no checkout has nothing to lose: the choice moves it at once.)
	res, err := p.move(t, thread, "acme/lib", false)
	require.NoError(t, err)
	require.Equal(t, "github.com/acme/lib", res.Choice.Name)
	require.True(t, res.Replaced)
	row, err := p.store.ThreadRepoGet(t.Context(), thread)
	require.NoError(t, err)
	require.Equal(t, "github.com/acme/lib", row.Repo)
	require.Equal(t, branch, row.WorkBranch)

	out = p.turn(t, thread, "C1", "e1", "cat LIB.md; git rev-parse --abbrev-ref HEAD")
	require.NoError(t, out.Err)
	require.Contains(t, out.Answer, "# lib")
	require.Contains(t, out.Answer, branch)
	require.Contains(t, out.Workspace, "Checked out github.com/acme/lib")

	// The same choice again changes nothing.
	res, err = p.move(t, thread, "acme/lib", false)
	require.NoError(t, err)
	require.True(t, res.Choice.Same)

	// Bad choices: clear words, nothing recorded, the thread keeps working.
	p.srv.CreateRepo(t, "acme", "flaky", map[string][]byte{"F.md": []byte("f\n")})
	p.srv.FailFetches(true)
	_, err = p.move(t, thread, "acme/flaky", false)
	p.srv.FailFetches(false)
	require.ErrorIs(t, err, repo.ErrFetch)
	require.Contains(t, explain(err), "I could not fetch github.com/acme/flaky from the forge just now")
	for choice, want := range map[string]string{
		"other/app":            "github.com/other/app is not on this bot's list of allowed repositories",
		"acme/nope":            "I could not find github.com/acme/nope",
		"acme/lib@no-such":     "I could not find github.com/acme/lib (or its branch \"no-such\")",
		"evil.example/acme/x":  "evil.example/acme/x is not on this bot's list of allowed repositories",
		"acme/lib@--upload=ls": "That is not a repository I can use",
	} {
		_, err := p.move(t, thread, choice, false)
		require.Error(t, err, choice)
		require.True(t, strings.HasPrefix(explain(err), want), "%s: %s", choice, explain(err))
		require.NotContains(t, explain(err), p.token)
	}
	row, err = p.store.ThreadRepoGet(t.Context(), thread)
	require.NoError(t, err)
	require.Equal(t, "github.com/acme/lib", row.Repo, "no bad choice was recorded")

	// A commit not pushed: the move is refused, and the work is still there.
	require.NoError(t, p.turn(t, thread, "C1", "e2", "echo x >> LIB.md && git commit -q -am work && echo y > new.txt").Err)
	res, err = p.move(t, thread, "acme/app", false)
	require.ErrorIs(t, err, agentpool.ErrUnsaved)
	require.Equal(t, "The sandbox's checkout has 1 commit not pushed and uncommitted changes in 1 file(s) (branch "+branch+").", res.Lost)
	out = p.turn(t, thread, "C1", "e3", "git log -1 --format=%s; cat LIB.md")
	require.NoError(t, out.Err)
	require.Contains(t, out.Answer, "work\n# lib\nx", "refused: nothing was touched")

	// Pushed (and the stray file removed): the move goes ahead, and the record follows.
	require.NoError(t, p.turn(t, thread, "C1", "e4", "rm new.txt").Err)
	_, err = p.pool.Push(t.Context(), thread)
	require.NoError(t, err)
	row, err = p.store.ThreadRepoGet(t.Context(), thread)
	require.NoError(t, err)
	require.Equal(t, p.srv.Head(t, "acme", "lib", branch), row.PushedCommit)
	require.Equal(t, "Repository: github.com/acme/lib, branch "+branch+", last pushed "+row.PushedCommit[:12],
		p.restarted(t).Describe(t.Context(), agentpool.WorkspaceThread{ThreadKey: thread, ChannelID: "C1"}),
		"another process, with a cache of its own, reads the push from the record")
	res, err = p.move(t, thread, "acme/app", false)
	require.NoError(t, err)
	require.True(t, res.Replaced)
	require.Equal(t, "github.com/acme/lib", res.Choice.Previous)
	out = p.turn(t, thread, "C1", "e5", "cat README.md; ls LIB.md 2>&1")
	require.NoError(t, out.Err)
	require.Contains(t, out.Answer, "# app")
	require.Contains(t, out.Answer, "No such file")
	require.Contains(t, out.Workspace, "Checked out github.com/acme/app")
	row, err = p.store.ThreadRepoGet(t.Context(), thread)
	require.NoError(t, err)
	require.Equal(t, db.ThreadRepo{ThreadKey: thread, Repo: "github.com/acme/app", WorkBranch: branch, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}, row,
		"the push record was of the old repository")

	// Forced: the unpushed commit is dropped, and the reply's words say what.
	require.NoError(t, p.turn(t, thread, "C1", "e6", "echo z >> README.md && git commit -q -am doomed").Err)
	res, err = p.move(t, thread, "acme/lib", true)
	require.NoError(t, err)
	require.True(t, res.Replaced)
	require.Contains(t, res.Lost, "1 commit not pushed")
	out = p.turn(t, thread, "C1", "e7", "git log -1 --format=%s")
	require.NoError(t, out.Err)
	require.Contains(t, out.Answer, "work", "back on lib, where the thread's pushed branch is restored")
	require.Contains(t, out.Workspace, "restored from its last push")

	// Durable: a workspace built again (a restart) over the same store knows the thread's choice.
	require.Equal(t, "Repository: github.com/acme/lib, branch "+branch+", not pushed yet",
		p.restarted(t).Describe(t.Context(), agentpool.WorkspaceThread{ThreadKey: thread, ChannelID: "C1"}),
		"its cache is new and the record of lib's earlier push went when the thread moved away: the thread is on lib, nothing pushed since")
}

// restarted is the workspace another process would build over the same store, with a cache of its
// own and no default.
func (p repoPool) restarted(t *testing.T) agentpool.WorkspaceDescriber {
	t.Helper()
	cfg := config.Default()
	cfg.Repos.Allow, cfg.Repos.CacheDir = []string{"github.com/acme"}, t.TempDir()
	cfg.Git.Token, cfg.Git.URL = p.token, p.srv.URL()
	ws, err := newWorkspace(cfg, p.store, nil)
	require.NoError(t, err)
	return ws.(agentpool.WorkspaceDescriber)
}
