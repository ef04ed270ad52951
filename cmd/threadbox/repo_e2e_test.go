package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/repo"
	"github.com/threadbox/threadbox/agentpool/repo/githubfake"
	"github.com/threadbox/threadbox/agentpool/repo/gitserver"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// slackThread drives one Slack thread against serve: each message is a mention in the thread, and
// each call waits for what the bot said about it.
type slackThread struct {
	fake   *slackfake.Server
	events string
	ch     string
	root   string
}

const repoE2EWait = 3 * time.Minute

// deliver sends a mention in the thread (or the thread's first, top-level one).
func (st *slackThread) deliver(t *testing.T, text string) slackfake.Event {
	t.Helper()
	var ev slackfake.Event
	if st.root == "" {
		ev = st.fake.Mention(st.ch, "U1", text)
		st.root = ev.TS
	} else {
		ev = st.fake.Mention(st.ch, "U1", text, slackfake.InThread(st.root))
	}
	res, err := st.fake.Deliver(t.Context(), st.events, ev)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status)
	return ev
}

// botSaid is everything the bot said in the thread.
func (st *slackThread) botSaid() []string {
	var out []string
	for _, m := range st.fake.Replies(st.ch, st.root) {
		if m.BotID != "" {
			out = append(out, m.Text)
		}
	}
	return out
}

// command sends a command and returns the bot's new reply that contains want.
func (st *slackThread) command(t *testing.T, text, want string) string {
	t.Helper()
	before := len(st.botSaid())
	st.deliver(t, text)
	var got string
	ctx, cancel := context.WithTimeout(t.Context(), repoE2EWait)
	defer cancel()
	err := st.fake.Wait(ctx, func() bool {
		for _, s := range st.botSaid()[min(before, len(st.botSaid())):] {
			if strings.Contains(s, want) {
				got = s
				return true
			}
		}
		return false
	})
	require.NoError(t, err, "%q: no reply with %q; the bot said: %q", text, want, st.botSaid())
	return got
}

// turn sends a request to the agent, waits for ✅ (or ❌) on it, and returns the thread's text.
func (st *slackThread) turn(t *testing.T, text string) string {
	t.Helper()
	ev := st.deliver(t, text)
	ctx, cancel := context.WithTimeout(t.Context(), repoE2EWait)
	defer cancel()
	var done string
	require.NoError(t, st.fake.Wait(ctx, func() bool {
		for _, r := range st.fake.Reactions(st.ch, ev.TS) {
			if r == "white_check_mark" || r == "x" {
				done = r
				return true
			}
		}
		return false
	}), "%q did not finish", text)
	all := strings.Join(st.botSaid(), "\n")
	require.Equal(t, "white_check_mark", done, "%q failed: %s", text, all)
	return all
}

// TestServeRepoCommandOverSlack: serve on PostgreSQL and Docker, with a loopback git server and the
// GitHub fake, no default repository and acme on the allowlist. In a Slack thread, "repo" chooses
// the repository before the first turn; an unknown repository, one off the allowlist, a failing
// clone and a rejected push each get a clear reply and the thread keeps working; unpushed work
// blocks a move until pushed; the choice and the push survive a restart (status, the ops view);
// then the thread moves to another repository.
func TestServeRepoCommandOverSlack(t *testing.T) {
	prov := dockertest.New(t, docker.Options{})
	const image = "threadbox/sandbox-base:latest"
	sandboxtest.RequireService(t, "sandbox base image (make sandbox-image)", prov.CheckImage(t.Context(), image))
	var b [6]byte
	_, _ = rand.Read(b[:])
	token := "tbtoken" + hex.EncodeToString(b[:])
	srv := gitserver.New(t, token)
	srv.CreateRepo(t, "acme", "app", map[string][]byte{"README.md": []byte("# app\n")})
	srv.CreateRepo(t, "acme", "lib", map[string][]byte{"LIB.md": []byte("# lib\n")})
	gh := githubfake.New(t, token, "acme/app", "acme/lib")
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	dep := fmt.Sprintf("repo-e2e-%d", time.Now().UnixNano())
	destroyDeployment(t, prov, dep)
	opts := fake.Options()
	env := []string{
		"THREADBOX_DATABASE_URL=" + dbtest.PostgresSchemaURL(t),
		"THREADBOX_RUNTIME_SECRET=repo-e2e-shared-runtime-secret",
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true",
		"THREADBOX_ADMIN_USERS=web:local",
		"THREADBOX_DEPLOYMENT=" + dep,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE=" + image,
		"THREADBOX_RUNTIME_NAME=shell",
		"THREADBOX_SLACK_BOT_TOKEN=" + opts.BotToken,
		"THREADBOX_SLACK_SIGNING_SECRET=" + opts.SigningSecret,
		"THREADBOX_SLACK_API_URL=" + fake.APIURL(),
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s",
		"THREADBOX_REPOS_ALLOW=github.com/acme",
		"THREADBOX_REPOS_CACHE_DIR=" + t.TempDir(),
		"THREADBOX_GIT_TOKEN=" + token,
		"THREADBOX_GIT_URL=" + srv.URL(),
		"THREADBOX_GIT_GITHUB_API_URL=" + gh.URL(),
	}
	sv := serveInProcess(t, env)
	stop := func(sv inProcessServe) {
		sv.cancel()
		require.NoError(t, <-sv.done)
		require.NoError(t, sv.m.Close())
	}
	st := &slackThread{fake: fake, events: "http://" + sv.addr + "/slack/events", ch: "C1"}

	st.command(t, "repo acme/lib", "This thread will work on github.com/acme/lib: the next message checks it out")
	out := st.turn(t, "cat LIB.md && git rev-parse --abbrev-ref HEAD")
	require.Contains(t, out, "# lib")
	require.Contains(t, out, "Checked out github.com/acme/lib")
	require.Contains(t, out, repo.BranchPrefix)

	// Bad input: each gets a clear reply, and changes nothing.
	st.command(t, "repo other/x", "The repository was not changed: github.com/other/x is not on this bot's list of allowed repositories")
	st.command(t, "repo acme/nope", "The repository was not changed: I could not find github.com/acme/nope")
	srv.FailFetches(true)
	st.command(t, "repo acme/app", "The repository was not changed: I could not fetch github.com/acme/app from the forge just now")
	srv.FailFetches(false)

	// Committed but not pushed: a move is refused until pushed; a refused push is said so.
	st.turn(t, "echo fix >> LIB.md && git commit -q -am 'fix lib'")
	st.command(t, "repo acme/app", "1 commit not pushed")
	srv.RejectPushes(true)
	st.command(t, "push", "Push failed: github.com/acme/lib refused the push")
	srv.RejectPushes(false)
	require.Contains(t, st.turn(t, "echo still working"), "still working", "the thread keeps working")
	st.command(t, "push", "Opened pull request #1")
	require.Len(t, gh.Pulls(), 1)

	// A restart: the thread's repository and its push are the database's, not the process's.
	stop(sv)
	sv = serveInProcess(t, env)
	st.events = "http://" + sv.addr + "/slack/events"
	head := srv.Head(t, "acme", "lib", gh.Pulls()[0].Head)
	require.NotEmpty(t, head)
	status := st.command(t, "status", "Repository: github.com/acme/lib")
	require.Contains(t, status, "last pushed "+head[:12])

	resp, err := http.Get("http://" + sv.addr + "/api/admin/sessions")
	require.NoError(t, err)
	var ops struct {
		Sessions []struct {
			ThreadKey    string `json:"thread_key"`
			Repo         string `json:"repo"`
			WorkBranch   string `json:"work_branch"`
			PushedCommit string `json:"pushed_commit"`
		} `json:"sessions"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ops))
	resp.Body.Close()
	require.Len(t, ops.Sessions, 1)
	require.Equal(t, "github.com/acme/lib", ops.Sessions[0].Repo, "the ops view shows the repository")
	require.Equal(t, repo.ThreadBranch(ops.Sessions[0].ThreadKey), ops.Sessions[0].WorkBranch)
	require.Equal(t, head, ops.Sessions[0].PushedCommit)

	// Everything pushed: the thread moves.
	st.command(t, "repo acme/app", "Moved this thread to github.com/acme/app.")
	out = st.turn(t, "cat README.md")
	require.Contains(t, out, "# app")
	require.Contains(t, out, "Checked out github.com/acme/app")
	stop(sv)
}
