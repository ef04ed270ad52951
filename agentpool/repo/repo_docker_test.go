package repo_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/repo"
	"github.com/threadbox/threadbox/agentpool/repo/gitserver"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// gitImage is the sandbox image with git (the test image is busybox only).
const gitImage = "threadbox/sandbox-base:latest"

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// gitSandbox starts a Docker sandbox (network none) with git in it, destroyed when t ends.
func gitSandbox(t testing.TB) sandbox.Sandbox {
	t.Helper()
	dep := "repotest-" + randomHex(4)
	prov := dockertest.New(t, docker.Options{Deployment: dep})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sandboxtest.RequireService(t, "sandbox base image (make sandbox-image)", prov.CheckImage(ctx, gitImage))
	h, err := prov.Create(ctx, sandbox.Spec{
		Image: gitImage, Labels: sandbox.Labels{Deployment: dep, Thread: "repo-test", Generation: 1},
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 256, ExecTimeout: 10 * time.Minute},
		Network:   sandbox.NetworkNone,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = prov.Destroy(ctx, h)
	})
	return sandbox.Bind(prov, h)
}

// sh runs a shell command in the sandbox's working directory and returns stdout; it fails the test
// on a non-zero exit.
func sh(t testing.TB, sb sandbox.Sandbox, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, "%s: %s", script, errb.String())
	return strings.TrimSpace(out.String())
}

type forge struct {
	srv   *gitserver.Server
	repos *repo.Repos
	token string
}

func newForge(t *testing.T) forge {
	t.Helper()
	token := "tbtoken" + randomHex(12)
	srv := gitserver.New(t, token)
	srv.CreateRepo(t, "acme", "app", map[string][]byte{"README.md": []byte("# app\n"), "src/main.go": []byte("package main\n")})
	r, err := repo.New(repo.Config{
		CacheDir: t.TempDir(), Token: token,
		Hosts: map[string]string{"github.com": srv.URL()}, Allow: repo.Allowlist{"github.com/acme"},
	})
	require.NoError(t, err)
	return forge{srv: srv, repos: r, token: token}
}

// TestRepoIntoTheSandboxAndBack: the thread's repository lands in /workspace on its threadbox/
// branch with no trace of the token; a commit made in the sandbox is pushed from the bot's side
// (a second push updates the branch); anything outside threadbox/* is refused; a refused push
// leaves the thread able to push again.
func TestRepoIntoTheSandboxAndBack(t *testing.T) {
	t.Parallel()
	f := newForge(t)
	sb := gitSandbox(t)
	ctx := t.Context()
	spec, err := repo.Parse("acme/app", "github.com")
	require.NoError(t, err)
	branch := repo.ThreadBranch("slack:T1:C1:1700000000.000100")
	require.True(t, strings.HasPrefix(branch, "threadbox/"))

	co, err := f.repos.Prepare(ctx, sb, spec, branch, repo.Identity{Name: "Ada Lovelace", Email: "ada@example.com"})
	require.NoError(t, err)
	require.True(t, co.Cold)
	require.Equal(t, "main", co.BaseBranch)
	require.Equal(t, f.srv.Head(t, "acme", "app", "main"), co.Base)
	require.Equal(t, branch, sh(t, sb, "git rev-parse --abbrev-ref HEAD"))
	require.Equal(t, "# app", sh(t, sb, "cat README.md"))
	require.Equal(t, "package main", sh(t, sb, "cat src/main.go"))
	require.Equal(t, f.repos.URL(spec), sh(t, sb, "git remote get-url origin"))
	require.Empty(t, sh(t, sb, "mkdir -p output/display input && touch input/x && git status --porcelain"), "the workdir's own directories are not changes")

	// No trace of the token anywhere in the sandbox: environment, files, .git/config.
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + f.token))
	for _, secret := range []string{f.token, basic} {
		require.NotContains(t, sh(t, sb, "env"), secret)
		require.NotContains(t, sh(t, sb, "cat .git/config"), secret)
		found := sh(t, sb, "grep -r -l -F '"+secret+"' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null || true")
		require.Empty(t, found, "files holding the token")
	}

	// The agent commits; push delivers it, as the chat user.
	sh(t, sb, "echo 'fixed' >> README.md && git commit -q -am 'fix the readme'")
	p1, err := f.repos.Push(ctx, sb, spec, branch)
	require.NoError(t, err)
	require.Equal(t, p1.Commit, f.srv.Head(t, "acme", "app", branch))
	require.Equal(t, "Ada Lovelace <ada@example.com>", strings.TrimSpace(f.srv.Git(t, "acme", "app", "log", "-1", "--format=%an <%ae>", branch)))
	_, err = f.repos.Push(ctx, sb, spec, branch)
	require.ErrorIs(t, err, repo.ErrNothingToPush)

	// A second push updates the branch.
	sh(t, sb, "echo 'more' >> README.md && git commit -q -am 'more'")
	p2, err := f.repos.Push(ctx, sb, spec, branch)
	require.NoError(t, err)
	require.NotEqual(t, p1.Commit, p2.Commit)
	require.Equal(t, p2.Commit, f.srv.Head(t, "acme", "app", branch))

	// Outside threadbox/*: refused before anything leaves the sandbox; main is untouched.
	mainBefore := f.srv.Head(t, "acme", "app", "main")
	sh(t, sb, "git branch -f main HEAD")
	for _, b := range []string{"main", "feature/x", "threadbox/../main", "-f"} {
		_, err = f.repos.Push(ctx, sb, spec, b)
		require.ErrorIs(t, err, repo.ErrBranchRefused, b)
	}
	require.Equal(t, mainBefore, f.srv.Head(t, "acme", "app", "main"))

	// A refused push says so and leaves the thread working.
	sh(t, sb, "echo 'third' >> README.md && git commit -q -am third")
	f.srv.RejectPushes(true)
	_, err = f.repos.Push(ctx, sb, spec, branch)
	require.ErrorIs(t, err, repo.ErrPushRejected)
	require.NotContains(t, err.Error(), f.token, "git's words, with the token scrubbed")
	require.Equal(t, p2.Commit, f.srv.Head(t, "acme", "app", branch))
	f.srv.RejectPushes(false)
	p3, err := f.repos.Push(ctx, sb, spec, branch)
	require.NoError(t, err)
	require.Equal(t, p3.Commit, f.srv.Head(t, "acme", "app", branch))

	// The branch moved on the forge behind the thread's back: the lease refuses to overwrite it.
	moved := f.srv.Git(t, "acme", "app", "commit-tree", "-p", p3.Commit, "-m", "someone else", p3.Commit+"^{tree}")
	f.srv.Git(t, "acme", "app", "update-ref", "refs/heads/"+branch, strings.TrimSpace(moved))
	sh(t, sb, "echo 'fourth' >> README.md && git commit -q -am fourth")
	_, err = f.repos.Push(ctx, sb, spec, branch)
	require.ErrorIs(t, err, repo.ErrPushRejected)
	require.Equal(t, strings.TrimSpace(moved), f.srv.Head(t, "acme", "app", branch), "someone else's commit is kept")
	f.srv.Git(t, "acme", "app", "update-ref", "refs/heads/"+branch, p3.Commit)

	// The sandbox is lost (docker rm -f, recreate): a new one starts from what was pushed.
	fresh := gitSandbox(t)
	co2, err := f.repos.Prepare(ctx, fresh, spec, branch, repo.Identity{Name: "Ada Lovelace", Email: "ada@example.com"})
	require.NoError(t, err)
	require.True(t, co2.Restored)
	require.False(t, co2.Cold, "from the cache")
	require.Equal(t, p3.Commit, co2.Base)
	require.Equal(t, "# app\nfixed\nmore\nthird", sh(t, fresh, "cat README.md"), "the pushed work is back; the unpushed commit is not")
	sh(t, fresh, "echo 'after restore' >> README.md && git commit -q -am 'after restore'")
	p4, err := f.repos.Push(ctx, fresh, spec, branch)
	require.NoError(t, err, "the lease expects the restored commit")
	require.Equal(t, p4.Commit, f.srv.Head(t, "acme", "app", branch))
}

// TestRepoBadInput: each bad request fails with its own error before anything reaches a sandbox,
// and the next good one works (from the cache).
func TestRepoBadInput(t *testing.T) {
	t.Parallel()
	f := newForge(t)
	sb := gitSandbox(t)
	ctx := t.Context()
	branch := repo.ThreadBranch("web:bad")
	tests := []struct {
		name string
		spec string
		mod  func(*repo.Config)
		want error
	}{
		{"unknown repository", "acme/nope", nil, repo.ErrNotFound},
		{"unknown branch", "acme/app@nope", nil, repo.ErrNotFound},
		{"host off the allowlist", "gitlab.com/acme/app", nil, repo.ErrNotAllowed},
		{"owner off the allowlist", "other/app", nil, repo.ErrNotAllowed},
		{"wrong token", "acme/app", func(c *repo.Config) { c.Token = "wrong" }, repo.ErrFetch},
		{"forge unreachable", "acme/app", func(c *repo.Config) { c.Hosts = map[string]string{"github.com": "http://127.0.0.1:1"} }, repo.ErrFetch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.repos
			if tc.mod != nil {
				cfg := repo.Config{CacheDir: t.TempDir(), Token: f.token, Hosts: map[string]string{"github.com": f.srv.URL()}, Allow: repo.Allowlist{"github.com/acme"}}
				tc.mod(&cfg)
				var err error
				r, err = repo.New(cfg)
				require.NoError(t, err)
			}
			spec, err := repo.Parse(tc.spec, "github.com")
			require.NoError(t, err)
			_, err = r.Prepare(ctx, sb, spec, branch, repo.Identity{Name: "a", Email: "a@example.com"})
			require.ErrorIs(t, err, tc.want)
			require.NotContains(t, err.Error(), f.token)
		})
	}
	require.Equal(t, "", sh(t, sb, "ls -A"), "nothing reached the sandbox")
	spec, err := repo.Parse("acme/app", "github.com")
	require.NoError(t, err)
	co, err := f.repos.Prepare(ctx, sb, spec, branch, repo.Identity{Name: "a", Email: "a@example.com"})
	require.NoError(t, err)
	require.Equal(t, branch, co.Branch)
}

// TestEnsureNeverGoesOverAWorkingTree: Ensure checks out once; after that, even with its marker
// cleaned away (git clean -x), it leaves the working tree and the agent's changes alone.
func TestEnsureNeverGoesOverAWorkingTree(t *testing.T) {
	t.Parallel()
	f := newForge(t)
	sb := gitSandbox(t)
	spec, err := repo.Parse("acme/app", "github.com")
	require.NoError(t, err)
	who := repo.Identity{Name: "a", Email: "a@example.com"}
	note, err := f.repos.Ensure(t.Context(), sb, spec, "web:ensure", who)
	require.NoError(t, err)
	require.Contains(t, note, "Checked out github.com/acme/app")
	sh(t, sb, "echo 'agent work' >> README.md && git clean -fdxq && test ! -e .threadbox")
	for range 2 {
		note, err = f.repos.Ensure(t.Context(), sb, spec, "web:ensure", who)
		require.NoError(t, err)
		require.Empty(t, note)
	}
	require.Equal(t, "# app\nagent work", sh(t, sb, "cat README.md"))
}
