package slack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// adminUser is the admin in every end-to-end stack (admin.users: [slack:UADMIN]).
const adminUser = "UADMIN"

// stack is `threadbox serve`'s wiring (cmd/threadbox/wire.go) on PostgreSQL, a real Docker sandbox
// and the shell runtime, with the Slack adapter in front and slackfake as Slack.
type stack struct {
	*harness
	store      db.Store
	prov       *docker.Provider
	deployment string
	pool       *agentpool.Pool
}

func newStack(t *testing.T, mod ...func(*Options)) *stack {
	t.Helper()
	st := dbtest.OpenPostgres(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	dep := "slacktest-" + hex.EncodeToString(b[:])
	log := zaptest.NewLogger(t)
	prov := dockertest.New(t, docker.Options{Deployment: dep, Logger: log})
	t.Cleanup(func() { destroyDeployment(t, prov, dep) })
	pool, err := agentpool.New(agentpool.Config{
		Deployment: dep, Image: dockertest.Image(),
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 128, ExecTimeout: 10 * time.Minute},
	}, agentpool.Deps{Store: st, Provider: prov, Runtime: shell.New(), Logger: log})
	require.NoError(t, err)
	maint, err := agentpool.NewMaintainer(agentpool.MaintainerConfig{}, agentpool.MaintainerDeps{
		Store: st, Provider: prov, Deployment: dep, Logger: log,
		OnStuck: func(_ context.Context, tr db.Turn) { pool.Cancel(tr.ThreadKey) },
	})
	require.NoError(t, err)
	admin := bot.NewAdmin(st, agentpool.Ops{Pool: pool, Maint: maint}, []string{"slack:" + adminUser}, log)
	// A short progress interval keeps the tests quick; serve uses the 2 s default.
	handler := bot.NewHandler(bot.HandlerConfig{ProgressInterval: 100 * time.Millisecond}, pool, st, admin, log)
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	all := append([]func(*Options){func(o *Options) { o.Admin, o.Sessions = admin, bot.NewDirectory(st) }}, mod...)
	hs := newHarness(t, fake, handler, all...)
	s := &stack{harness: hs, store: st, prov: prov, deployment: dep, pool: pool}
	t.Cleanup(func() {
		// Shutdown in serve's order: intake first (the adapter drains), then the pool lets running
		// turns finish. Cleanups run last-in first-out, so this runs before the sandboxes go.
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = hs.ad.Close()
		_ = pool.Shutdown(ctx)
	})
	return s
}

func destroyDeployment(t *testing.T, p sandbox.Provider, dep string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := p.List(ctx, map[string]string{sandbox.LabelDeployment: dep})
	if err != nil {
		t.Logf("cleanup: listing sandboxes: %v", err)
		return
	}
	for _, info := range list {
		_ = p.Destroy(ctx, info.Handle)
	}
}

// sandboxes lists this stack's sandboxes on the Docker engine.
func (s *stack) sandboxes(t *testing.T) []sandbox.Info {
	t.Helper()
	list, err := s.prov.List(t.Context(), map[string]string{sandbox.LabelDeployment: s.deployment})
	require.NoError(t, err)
	return list
}

// waitDone waits for the final ✅ (or ❌) on a message, and for the 👀 to be gone (it is removed
// right after the final reaction is added).
func (s *stack) waitDone(t *testing.T, channel, ts string) string {
	t.Helper()
	var got string
	waitFake(t, s.fake, "the final reaction on "+ts, func() bool {
		r := s.fake.Reactions(channel, ts)
		if len(r) == 1 && (r[0] == bot.ReactDone || r[0] == bot.ReactError) {
			got = r[0]
			return true
		}
		return false
	})
	return got
}

// answers returns the bot's replies in a thread that match re, in order (users' messages excluded).
func answers(fake *slackfake.Server, channel, thread string, re *regexp.Regexp) []string {
	var out []string
	for _, m := range fake.Replies(channel, thread) {
		if m.BotID != "" && re.MatchString(m.Text) {
			out = append(out, m.Text)
		}
	}
	return out
}

// progressMessages are the bot's "working…" messages in a thread: the ones it edited.
func progressMessages(fake *slackfake.Server, channel, thread string) []slackfake.Message {
	var out []slackfake.Message
	for _, m := range fake.Replies(channel, thread) {
		if m.BotID != "" && (len(m.Edits) > 0 || strings.HasPrefix(m.Text, "working") || strings.HasPrefix(m.Text, "done in")) {
			out = append(out, m)
		}
	}
	return out
}

// slashCommand runs /threadbox <text> over HTTP and returns the ephemeral reply's text.
func (s *stack) slashCommand(t *testing.T, user, text string) string {
	t.Helper()
	res, err := s.fake.SlashCommand(t.Context(), s.commands, slackfake.SlashCommand{Text: text, UserID: user})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.Status)
	var reply ephemeral
	require.NoError(t, json.Unmarshal(res.Body, &reply))
	require.Equal(t, "ephemeral", reply.ResponseType)
	return reply.Text
}
