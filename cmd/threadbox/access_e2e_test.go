package main

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestServeAccessPolicyOnSlack is the Security issue's acceptance for who may use the bot, through the
// real serve wiring, Docker and the fake Slack: a user outside access.users gets one refusal however
// often they write, and no sandbox; a member of a thread who did not start it cannot reset it.
func TestServeAccessPolicyOnSlack(t *testing.T) {
	prov := dockertest.New(t, docker.Options{})
	pg := dbtest.PostgresSchemaURL(t)
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	dep := fmt.Sprintf("access-e2e-%d", time.Now().UnixNano())
	sandboxes := func() []sandbox.Info {
		list, err := prov.List(context.Background(), map[string]string{sandbox.LabelDeployment: dep})
		require.NoError(t, err)
		return list
	}
	t.Cleanup(func() {
		for _, i := range sandboxes() {
			_ = prov.Destroy(context.Background(), i.Handle)
		}
	})
	opts := fake.Options()
	sv := serveInProcess(t, []string{
		"THREADBOX_DATABASE_URL=" + pg,
		"THREADBOX_RUNTIME_SECRET=access-e2e-shared-runtime-secret",
		"THREADBOX_HTTP_ADDR=127.0.0.1:0",
		"THREADBOX_DEPLOYMENT=" + dep,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE=" + dockertest.Image(),
		"THREADBOX_SLACK_BOT_TOKEN=" + opts.BotToken,
		"THREADBOX_SLACK_SIGNING_SECRET=" + opts.SigningSecret,
		"THREADBOX_SLACK_API_URL=" + fake.APIURL(),
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s",
		"THREADBOX_ACCESS_USERS=slack:UOWNER,slack:UMEMBER",
	})
	events := "http://" + sv.addr + "/slack/events"
	deliver := func(ev slackfake.Event) {
		res, err := fake.Deliver(t.Context(), events, ev)
		require.NoError(t, err)
		require.Equal(t, 200, res.Status, "a refused message is still acknowledged: Slack must not retry it")
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer wcancel()
	botSaid := func(channel, ts string, re *regexp.Regexp) int {
		n := 0
		for _, m := range fake.Replies(channel, ts) {
			if m.BotID != "" && re.MatchString(m.Text) {
				n++
			}
		}
		return n
	}

	// A stranger: two messages, one polite refusal, no sandbox.
	first := fake.Mention("C1", "USTRANGER", "echo hi")
	deliver(first)
	second := fake.Mention("C1", "USTRANGER", "echo again")
	deliver(second)
	refusal := regexp.MustCompile(`only work for the people`)
	toldStranger := func() int {
		n := 0
		for _, e := range fake.Ephemerals("C1") {
			if e.User == "USTRANGER" && refusal.MatchString(e.Text) {
				n++
			}
		}
		return n
	}
	require.NoError(t, fake.Wait(wctx, func() bool { return toldStranger() == 1 }), "told privately, not in the channel")

	// The owner starts a thread; a member then tries to reset it.
	own := fake.Mention("C1", "UOWNER", "echo owned")
	deliver(own)
	require.NoError(t, fake.Wait(wctx, func() bool { return botSaid("C1", own.TS, regexp.MustCompile(`owned`)) == 1 }))
	require.Len(t, sandboxes(), 1, "the owner's thread has its sandbox; the stranger got none")
	require.Equal(t, 1, toldStranger(), "told once, not per message")
	require.Zero(t, botSaid("C1", first.TS, refusal)+botSaid("C1", second.TS, refusal), "nothing in the channel")

	deliver(fake.Mention("C1", "UMEMBER", "reset", slackfake.InThread(own.TS)))
	require.NoError(t, fake.Wait(wctx, func() bool {
		return botSaid("C1", own.TS, regexp.MustCompile(`Only the person who started this thread`)) == 1
	}))
	list := sandboxes()
	require.Len(t, list, 1, "the member's reset did nothing")
	require.Equal(t, sandbox.StateRunning, list[0].State)

	deliver(fake.Mention("C1", "UOWNER", "reset", slackfake.InThread(own.TS)))
	require.NoError(t, fake.Wait(wctx, func() bool { return botSaid("C1", own.TS, regexp.MustCompile(`^Reset:`)) == 1 }))
	require.Empty(t, sandboxes(), "the owner's reset destroyed it")

	sv.cancel()
	require.NoError(t, <-sv.done)
	require.NoError(t, sv.m.Close())
}
