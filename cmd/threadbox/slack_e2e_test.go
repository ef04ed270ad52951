package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestServeAnswersASlackMention drives the real serve wiring (config → store → Docker → pool → Slack
// adapter) with PostgreSQL, against the fake Slack: a signed mention is answered in its thread.
func TestServeAnswersASlackMention(t *testing.T) {
	prov := dockertest.New(t, docker.Options{})
	pg := dbtest.PostgresSchemaURL(t)
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	dep := fmt.Sprintf("slack-e2e-%d", time.Now().UnixNano())
	destroyDeployment(t, prov, dep)
	opts := fake.Options()
	env := []string{
		"THREADBOX_DATABASE_URL=" + pg,
		"THREADBOX_RUNTIME_SECRET=slack-e2e-shared-runtime-secret", // required with PostgreSQL
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true",
		"THREADBOX_DEPLOYMENT=" + dep,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE=" + dockertest.Image(),
		"THREADBOX_SLACK_BOT_TOKEN=" + opts.BotToken,
		"THREADBOX_SLACK_SIGNING_SECRET=" + opts.SigningSecret,
		"THREADBOX_SLACK_API_URL=" + fake.APIURL(),
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s",
		"THREADBOX_ADMIN_USERS=web:local",
	}
	sv := serveInProcess(t, env)
	addr, cancel, done, m := sv.addr, sv.cancel, sv.done, sv.m
	events := "http://" + addr + "/slack/events"

	ev := fake.Mention("C1", "U1", "echo hi > output/display/hi.txt && echo answered")
	res, err := fake.Deliver(t.Context(), events, ev)
	require.NoError(t, err)
	require.Equal(t, 200, res.Status)
	forged, err := fake.Deliver(t.Context(), events, fake.Mention("C1", "U1", "echo no"), slackfake.SignWith("wrong"))
	require.NoError(t, err)
	require.Equal(t, 401, forged.Status, "a bad signature is refused")

	wctx, wcancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer wcancel()
	require.NoError(t, fake.Wait(wctx, func() bool {
		for _, r := range fake.Reactions("C1", ev.TS) {
			if r == "white_check_mark" {
				return true
			}
		}
		return false
	}), "the turn finished with ✅")
	var texts []string
	for _, msg := range fake.Replies("C1", ev.TS) {
		texts = append(texts, msg.Text)
	}
	require.Contains(t, strings.Join(texts, "\n"), "answered", "the answer is in the thread")
	files := fake.Files("C1")
	require.Len(t, files, 1)
	require.Equal(t, "hi.txt", files[0].Name)
	require.Equal(t, "hi\n", string(files[0].Data), "the artifact's bytes were shared")
	require.Equal(t, ev.TS, files[0].ThreadTS, "into the thread")

	// The operator CLI (another process on the same PostgreSQL) lists what the web ops view lists.
	resp, err := http.Get("http://" + addr + "/api/admin/sessions")
	require.NoError(t, err)
	var web struct {
		Sessions []struct {
			ThreadKey string `json:"thread_key"`
			Status    string `json:"status"`
		} `json:"sessions"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&web))
	resp.Body.Close()
	require.Len(t, web.Sessions, 1)
	cli, _, err := runMain(t, env, "admin", "sessions")
	require.NoError(t, err)
	require.Contains(t, cli, web.Sessions[0].ThreadKey+"  "+web.Sessions[0].Status)
	require.Len(t, strings.Split(strings.TrimSpace(cli), "\n"), 2, "a header and the one session: %s", cli)

	cancel()
	require.NoError(t, <-done)
	require.NoError(t, m.Close())
}
