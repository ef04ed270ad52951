package repo

import (
	"bufio"
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// localSandbox is a fake sandbox whose commands run on this machine in a directory of their own
// (its working directory), so git and tar in it are real; files written through the provider's API
// (the marker) stay in the fake's map.
func localSandbox(t *testing.T) (sandbox.Sandbox, string) {
	t.Helper()
	dir := t.TempDir()
	prov := sandboxfake.New()
	prov.Exec_ = func(ctx context.Context, _ *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		cmd := exec.CommandContext(ctx, req.Cmd[0], req.Cmd[1:]...)
		cmd.Dir, cmd.Env = dir, git{}.env()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return sandbox.ExecResult{ExitCode: ee.ExitCode()}, nil
		}
		return sandbox.ExecResult{}, err
	}
	h, err := prov.Create(t.Context(), sandbox.Spec{Image: "x", WorkDir: "/work", Labels: sandbox.Labels{Deployment: "d", Thread: "t", Generation: 1}})
	require.NoError(t, err)
	return sandbox.Bind(prov, h), dir
}

// inDir runs git in dir (the test's side) and returns its trimmed output.
func inDir(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git{}.run(t.Context(), dir, args...)
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

type fakeForge struct{ got []PRRequest }

func (f *fakeForge) EnsurePullRequest(_ context.Context, req PRRequest) (PullRequest, error) {
	f.got = append(f.got, req)
	return PullRequest{Number: 1, URL: "https://forge.example/pr/1", Created: true}, nil
}

func localRepos(t *testing.T, base string) *Repos {
	t.Helper()
	r, err := New(Config{CacheDir: t.TempDir(), Hosts: map[string]string{"github.com": base}, Allow: Allowlist{"github.com/acme"}})
	require.NoError(t, err)
	return r
}

var who = Identity{Name: "u", Email: "u@x"}

// The harness itself: a checkout, a commit, a push and its pull request, end to end without Docker.
func TestDeliverLocal(t *testing.T) {
	base := localForge(t)
	r := localRepos(t, base)
	sb, dir := localSandbox(t)
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}
	_, err := r.Ensure(t.Context(), sb, spec, "thread-1", who)
	require.NoError(t, err)
	inDir(t, dir, "commit", "--quiet", "--allow-empty", "-m", "the change")
	f := &fakeForge{}
	note, err := r.Deliver(t.Context(), sb, spec, "thread-1", f)
	require.NoError(t, err)
	require.Contains(t, note, "Opened pull request #1")
	require.Equal(t, inDir(t, dir, "rev-parse", "HEAD"), inDir(t, filepath.Join(base, "acme", "app.git"), "rev-parse", "refs/heads/"+ThreadBranch("thread-1")))
}

// The thread moved to another repository (the repo command records the choice, then replaces the
// sandbox), but the sandbox still holds the first one's checkout (its destroy failed, or has not
// run yet): push must not send that branch to the repository the thread now names, a fork with the
// same history that would take it.
func TestDeliverRefusesACheckoutOfAnotherRepository(t *testing.T) {
	base := localForge(t)
	inDir(t, "", "clone", "--quiet", "--bare", filepath.Join(base, "acme", "app.git"), filepath.Join(base, "acme", "fork.git"))
	r := localRepos(t, base)
	sb, dir := localSandbox(t)
	_, err := r.Ensure(t.Context(), sb, Spec{Host: "github.com", Owner: "acme", Name: "app"}, "thread-1", who)
	require.NoError(t, err)
	inDir(t, dir, "commit", "--quiet", "--allow-empty", "-m", "work on app")

	f := &fakeForge{}
	_, err = r.Deliver(t.Context(), sb, Spec{Host: "github.com", Owner: "acme", Name: "fork"}, "thread-1", f)
	require.ErrorIs(t, err, ErrOtherCheckout)
	require.NotEmpty(t, UserText(err, Spec{}))
	require.Empty(t, f.got)
	_, err = git{}.run(t.Context(), filepath.Join(base, "acme", "fork.git"), "rev-parse", "--verify", "--quiet", "refs/heads/"+ThreadBranch("thread-1"))
	require.Error(t, err, "the fork got the other repository's branch")
}

// A push the forge refuses must leave nothing of the sandbox's in the shared cache: every later
// checkout of the repository, for any thread, copies the cache's objects into its sandbox, so a
// refused push's commits (one thread's unpushed work, or up to MaxBundle of whatever a hostile
// sandbox bundled) would reach every other thread's sandbox.
func TestRefusedPushLeavesNothingInTheCache(t *testing.T) {
	base := localForge(t)
	forgeDir := filepath.Join(base, "acme", "app.git")
	r := localRepos(t, base)
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}
	sbA, dirA := localSandbox(t)
	_, err := r.Ensure(t.Context(), sbA, spec, "thread-a", who)
	require.NoError(t, err)
	inDir(t, dirA, "commit", "--quiet", "--allow-empty", "-m", "thread a's private work")
	secret := inDir(t, dirA, "rev-parse", "HEAD")
	// Someone else created the thread's branch on the forge meanwhile: the lease refuses the push.
	inDir(t, forgeDir, "update-ref", "refs/heads/"+ThreadBranch("thread-a"), "refs/heads/main")

	_, err = r.Push(t.Context(), sbA, spec, ThreadBranch("thread-a"))
	require.ErrorIs(t, err, ErrPushRejected)

	sbB, dirB := localSandbox(t)
	_, err = r.Ensure(t.Context(), sbB, spec, "thread-b", who)
	require.NoError(t, err)
	_, err = git{}.run(t.Context(), dirB, "cat-file", "-e", secret)
	require.Error(t, err, "thread b's sandbox holds thread a's refused commit")
	_, err = git{}.run(t.Context(), r.cachePath(spec), "cat-file", "-e", secret)
	require.Error(t, err, "the cache holds the refused commit")
}

// The commit's subject is the agent's (or a hostile sandbox's) text: a subject of thousands of
// characters made a pull request title GitHub refuses (it allows 256), so every push failed to open
// one, and went whole into the chat reply.
func TestDeliverBoundsTheCommitSubject(t *testing.T) {
	r := localRepos(t, localForge(t))
	sb, dir := localSandbox(t)
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}
	_, err := r.Ensure(t.Context(), sb, spec, "thread-1", who)
	require.NoError(t, err)
	inDir(t, dir, "commit", "--quiet", "--allow-empty", "-m", strings.Repeat("long subject ", 2000))
	f := &fakeForge{}
	note, err := r.Deliver(t.Context(), sb, spec, "thread-1", f)
	require.NoError(t, err)
	require.Len(t, f.got, 1)
	require.LessOrEqual(t, len([]rune(f.got[0].Title)), 256)
	require.True(t, strings.HasPrefix(f.got[0].Title, "Threadbox: long subject long subject"))
	require.Less(t, len(f.got[0].Body), 1000)
	require.Less(t, len(note), 1000)
}

// The pull request goes into the branch the thread started from, which the bot knows (the
// thread's repository names it, or it is the forge's default branch): the checkout marker is a file
// in the sandbox, so an agent could rewrite it to aim the pull request at any branch.
func TestDeliverOpensThePullRequestIntoTheThreadsBase(t *testing.T) {
	base := localForge(t)
	inDir(t, filepath.Join(base, "acme", "app.git"), "branch", "release", "main")
	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{"the default branch", Spec{Host: "github.com", Owner: "acme", Name: "app"}, "main"},
		{"a named branch", Spec{Host: "github.com", Owner: "acme", Name: "app", Branch: "main"}, "main"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := localRepos(t, base)
			sb, dir := localSandbox(t)
			_, err := r.Ensure(t.Context(), sb, tc.spec, "thread-"+tc.name, who)
			require.NoError(t, err)
			inDir(t, dir, "commit", "--quiet", "--allow-empty", "-m", "work")
			raw, err := sb.ReadFile(t.Context(), markerPath, 1<<20)
			require.NoError(t, err)
			require.NoError(t, sb.WriteFile(t.Context(), markerPath, []byte(strings.Replace(string(raw), `"base_branch":"main"`, `"base_branch":"release"`, 1)), 0o644))
			f := &fakeForge{}
			_, err = r.Deliver(t.Context(), sb, tc.spec, "thread-"+tc.name, f)
			require.NoError(t, err)
			require.Len(t, f.got, 1)
			require.Equal(t, tc.want, f.got[0].Base)
		})
	}
}

// What a sandbox writes to git bundle's standard error goes into the push's error (and the log):
// it is bounded like git's own stderr on the bot's side, not kept whole (the provider bounds each
// stream only at MaxBundle, 512 MiB by default).
func TestPushBoundsTheSandboxsBundleStderr(t *testing.T) {
	r := localRepos(t, localForge(t))
	prov := sandboxfake.New()
	prov.Exec_ = func(_ context.Context, _ *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		switch {
		case req.Cmd[1] == "rev-parse" && strings.HasPrefix(req.Cmd[len(req.Cmd)-1], "refs/heads/"):
			_, _ = io.WriteString(req.Stdout, strings.Repeat("a", 40)+"\n")
			return sandbox.ExecResult{}, nil
		case req.Cmd[1] == "bundle":
			line := strings.Repeat("x", 1023) + "\n"
			for range 8 << 10 {
				_, _ = io.WriteString(req.Stderr, line)
			}
			return sandbox.ExecResult{ExitCode: 128}, nil
		}
		return sandbox.ExecResult{ExitCode: 1}, nil
	}
	h, err := prov.Create(t.Context(), sandbox.Spec{Image: "x", WorkDir: "/work", Labels: sandbox.Labels{Deployment: "d", Thread: "t", Generation: 1}})
	require.NoError(t, err)
	_, err = r.Push(t.Context(), sandbox.Bind(prov, h), Spec{Host: "github.com", Owner: "acme", Name: "app"}, ThreadBranch("t"))
	require.ErrorIs(t, err, ErrBadBundle)
	require.Less(t, len(err.Error()), 2*maxStderr)
}

// The "bundle" is whatever the sandbox writes: a header listing a million refs costs it nothing.
// What git then lists on the bot's side is bounded, and the push's error quotes little of it.
func TestPushBoundsAHostileBundlesHeads(t *testing.T) {
	r := localRepos(t, localForge(t))
	prov := sandboxfake.New()
	head := strings.Repeat("a", 40)
	prov.Exec_ = func(_ context.Context, _ *sandboxfake.Box, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
		switch {
		case req.Cmd[1] == "rev-parse" && strings.HasPrefix(req.Cmd[len(req.Cmd)-1], "refs/heads/"):
			_, _ = io.WriteString(req.Stdout, head+"\n")
			return sandbox.ExecResult{}, nil
		case req.Cmd[1] == "bundle":
			w := bufio.NewWriter(req.Stdout)
			_, _ = w.WriteString("# v2 git bundle\n")
			for i := range 20_000 { // 1.5 MB of heads
				fmt.Fprintf(w, "%s refs/heads/threadbox/%030d\n", head, i)
			}
			_, _ = w.WriteString("\n")
			// An empty pack: "PACK", version 2, no objects, and its SHA-1.
			pack := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
			sum := sha1.Sum(pack)
			_, _ = w.Write(append(pack, sum[:]...))
			_ = w.Flush()
			return sandbox.ExecResult{}, nil
		}
		return sandbox.ExecResult{ExitCode: 1}, nil
	}
	h, err := prov.Create(t.Context(), sandbox.Spec{Image: "x", WorkDir: "/work", Labels: sandbox.Labels{Deployment: "d", Thread: "t", Generation: 1}})
	require.NoError(t, err)
	_, err = r.Push(t.Context(), sandbox.Bind(prov, h), Spec{Host: "github.com", Owner: "acme", Name: "app"}, ThreadBranch("t"))
	require.ErrorIs(t, err, ErrBadBundle)
	require.Less(t, len(err.Error()), 2*maxStderr, "%.300s", err)
}

// Once the forge has the push, the bot's cache failing to record it (another replica sharing the
// cache holds the ref's lock) must neither report the push as failed nor leave the sandbox's
// record of it behind: the next push's lease would then expect the old commit and be refused for
// good.
func TestPushThatTheCacheCannotRecordStillCounts(t *testing.T) {
	r := localRepos(t, localForge(t))
	sb, dir := localSandbox(t)
	spec := Spec{Host: "github.com", Owner: "acme", Name: "app"}
	_, err := r.Ensure(t.Context(), sb, spec, "thread-1", who)
	require.NoError(t, err)
	branch := ThreadBranch("thread-1")
	lock := filepath.Join(r.cachePath(spec), "refs", "heads", branch+".lock")
	require.NoError(t, os.MkdirAll(filepath.Dir(lock), 0o755))
	require.NoError(t, os.WriteFile(lock, nil, 0o644))

	inDir(t, dir, "commit", "--quiet", "--allow-empty", "-m", "first")
	_, err = r.Deliver(t.Context(), sb, spec, "thread-1", &fakeForge{})
	require.NoError(t, err, "the forge has the push")

	require.NoError(t, os.Remove(lock))
	inDir(t, dir, "commit", "--quiet", "--allow-empty", "-m", "second")
	_, err = r.Deliver(t.Context(), sb, spec, "thread-1", &fakeForge{})
	require.NoError(t, err, "the next push was refused")
}
