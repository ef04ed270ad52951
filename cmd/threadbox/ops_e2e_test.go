package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// opsRig is serve in process on PostgreSQL and Docker, answering a fake Slack, with JSON logs and an
// admin token.
type opsRig struct {
	fake   *slackfake.Server
	sv     inProcessServe
	env    []string
	events string
	token  string
}

func newOpsRig(t *testing.T) *opsRig {
	t.Helper()
	prov := dockertest.New(t, docker.Options{})
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	dep := fmt.Sprintf("ops-e2e-%d", time.Now().UnixNano())
	destroyDeployment(t, prov, dep)
	opts := fake.Options()
	const token = "ops-e2e-admin-token"
	env := []string{
		"THREADBOX_DATABASE_URL=" + dbtest.PostgresSchemaURL(t),
		"THREADBOX_RUNTIME_SECRET=ops-e2e-shared-runtime-secret",
		"THREADBOX_HTTP_ADDR=127.0.0.1:0",
		"THREADBOX_HTTP_TOKEN=" + token,
		"THREADBOX_DEPLOYMENT=" + dep,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE=" + dockertest.Image(),
		"THREADBOX_SLACK_BOT_TOKEN=" + opts.BotToken,
		"THREADBOX_SLACK_SIGNING_SECRET=" + opts.SigningSecret,
		"THREADBOX_SLACK_API_URL=" + fake.APIURL(),
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s",
		"THREADBOX_ADMIN_USERS=web:local,slack:UADMIN",
		"THREADBOX_HTTP_TRUST_LOOPBACK=true", // the ops view as the operator at this machine (make run sets it)
		"THREADBOX_LOG_FORMAT=json",
		"THREADBOX_RUNTIME_NAME=shell",
	}
	sv := serveInProcess(t, env)
	return &opsRig{fake: fake, sv: sv, env: env, events: "http://" + sv.addr + "/slack/events", token: token}
}

func (o *opsRig) deliver(t *testing.T, ev slackfake.Event) {
	t.Helper()
	res, err := o.fake.Deliver(t.Context(), o.events, ev)
	require.NoError(t, err)
	require.Equal(t, 200, res.Status, "acknowledged: %s", res.Body)
}

// waitReaction waits until the message has the reaction (white_check_mark: answered).
func (o *opsRig) waitReaction(t *testing.T, ev slackfake.Event, reaction string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, o.fake.Wait(ctx, func() bool { return slices.Contains(o.fake.Reactions(ev.Channel, ev.TS), reaction) }),
		"%s on %q; the thread has %v", reaction, ev.Text, o.fake.Replies(ev.Channel, ev.TS))
}

// waitReply waits for a bot message in root's thread that contains text.
func (o *opsRig) waitReply(t *testing.T, root slackfake.Event, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, o.fake.Wait(ctx, func() bool {
		for _, m := range o.fake.Replies(root.Channel, root.TS) {
			if m.BotID != "" && strings.Contains(m.Text, text) {
				return true
			}
		}
		return false
	}), "a reply containing %q", text)
}

// scrape reads /metrics with the admin token.
func (o *opsRig) scrape(t *testing.T) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+o.sv.addr+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+o.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

// sandboxID is the thread's sandbox, from the ops view's API.
func (o *opsRig) sandboxID(t *testing.T, thread string) string {
	t.Helper()
	resp, err := http.Get("http://" + o.sv.addr + "/api/admin/sessions")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Sessions []struct {
			ThreadKey string `json:"thread_key"`
			SandboxID string `json:"sandbox_id"`
		} `json:"sessions"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	for _, s := range out.Sessions {
		if s.ThreadKey == thread {
			return s.SandboxID
		}
	}
	t.Fatalf("no session for %s in %+v", thread, out.Sessions)
	return ""
}

// stop ends serve and returns its JSON log lines.
func (o *opsRig) stop(t *testing.T) []map[string]any {
	t.Helper()
	o.sv.cancel()
	require.NoError(t, <-o.sv.done)
	require.NoError(t, o.sv.m.Close())
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(o.sv.stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			lines = append(lines, l)
		}
	}
	return lines
}

var seriesRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// metricValue sums the samples of name whose labels include every one of want ("k=v" pairs).
func metricValue(t *testing.T, body, name string, want ...string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		m := seriesRE.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		match := true
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			match = match && labels[k] == v
		}
		if match {
			f, err := strconv.ParseFloat(m[3], 64)
			require.NoError(t, err)
			sum += f
		}
	}
	return sum
}

// TestOpsSlackTurnsMoveMetricsAndLogSeedEvents: real serve on PostgreSQL and Docker answering a fake
// Slack. After a turn /metrics shows the turn, the resolve outcome and the upload; after a `docker rm
// -f` the recreate counter moved; a stopped turn is a fatal prompt failure. Each of seed 004's events
// these trigger is in the JSON log, with thread, generation, provider and turn id. (The shell runtime
// has no server and no agent session, so sandbox.health.retry, sandbox.session.replaced and a
// recoverable prompt failure are triggered in agentpool's tests: TestSeedLogEventsAndMetrics and, on
// Docker, TestDockerPromptOnARemovedSandboxIsRecoverable.)
func TestOpsSlackTurnsMoveMetricsAndLogSeedEvents(t *testing.T) {
	requireServices(t)
	o := newOpsRig(t)

	// Unauthenticated scrapes are refused.
	resp, err := http.Get("http://" + o.sv.addr + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	root := o.fake.Mention("C1", "U1", "echo hi > output/display/hi.txt && echo answered")
	o.deliver(t, root)
	o.deliver(t, root) // Slack's retry of the same event
	forged, err := o.fake.Deliver(t.Context(), o.events, o.fake.Mention("C1", "U1", "echo no"), slackfake.SignWith("wrong"))
	require.NoError(t, err)
	require.Equal(t, 401, forged.Status)
	o.waitReaction(t, root, "white_check_mark")
	thread := "slack:" + o.fake.Options().TeamID + ":C1:" + root.TS

	m := o.scrape(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"threadbox_turns_started_total", nil, 1},
		{"threadbox_turns_finished_total", []string{"outcome=done"}, 1},
		{"threadbox_turn_duration_seconds_count", []string{"outcome=done"}, 1},
		{"threadbox_turn_queue_wait_seconds_count", nil, 1},
		{"threadbox_turns_in_flight", nil, 0},
		{"threadbox_resolves_total", []string{"provider=docker", "outcome=create"}, 1},
		{"threadbox_resolve_duration_seconds_count", []string{"provider=docker", "outcome=create"}, 1},
		{"threadbox_chat_uploads_total", []string{"platform=slack", "outcome=ok"}, 1},
		{"threadbox_chat_events_received_total", []string{"platform=slack"}, 2},
		{"threadbox_chat_events_deduped_total", []string{"platform=slack"}, 1},
		{"threadbox_chat_acks_total", []string{"platform=slack"}, 2},
		{"threadbox_chat_events_refused_total", []string{"platform=slack", "reason=signature"}, 1},
		{"threadbox_sessions", []string{"status=active", "provider=docker"}, 1},
	} {
		require.Equal(t, c.want, metricValue(t, m, c.name, c.labels...), "%s%v", c.name, c.labels)
	}

	// docker rm -f behind the bot's back: the next turn recreates.
	out, err := exec.Command("docker", "rm", "-f", o.sandboxID(t, thread)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	again := o.fake.Mention("C1", "U1", "echo after-rm", slackfake.InThread(root.TS))
	o.deliver(t, again)
	o.waitReaction(t, again, "white_check_mark")
	require.Equal(t, 1.0, metricValue(t, o.scrape(t), "threadbox_resolves_total", "provider=docker", "outcome=recreate"))

	// A warm turn reuses the sandbox.
	warm := o.fake.Mention("C1", "U1", "echo warm", slackfake.InThread(root.TS))
	o.deliver(t, warm)
	o.waitReaction(t, warm, "white_check_mark")
	require.Equal(t, 1.0, metricValue(t, o.scrape(t), "threadbox_resolves_total", "provider=docker", "outcome=reuse"))

	// Stopped by the user: a fatal failure of that prompt.
	long := o.fake.Mention("C1", "U1", "echo long-start; sleep 60", slackfake.InThread(root.TS))
	o.deliver(t, long)
	o.waitReply(t, root, "long-start")
	o.deliver(t, o.fake.Mention("C1", "U1", "stop", slackfake.InThread(root.TS)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, o.fake.Wait(ctx, func() bool {
		return metricValue(t, o.scrape(t), "threadbox_turns_finished_total", "outcome=cancelled") == 1
	}), "the stopped turn ends cancelled")

	lines := o.stop(t)
	for _, ev := range []string{"sandbox.resolve.start", "sandbox.resolve.create", "sandbox.resolve.reuse",
		"sandbox.resolve.recreate", "sandbox.prompt.ok", "sandbox.prompt.fatal_fail"} {
		var found []map[string]any
		for _, l := range lines {
			if l["msg"] == ev {
				found = append(found, l)
			}
		}
		require.NotEmpty(t, found, "log event %s", ev)
		for _, l := range found {
			require.Equal(t, thread, l["thread"], "%s: thread", ev)
			require.Equal(t, "docker", l["provider"], "%s: provider", ev)
			require.Contains(t, l, "generation", ev)
			require.Positive(t, l["turn"], "%s: turn id", ev)
		}
	}
}
