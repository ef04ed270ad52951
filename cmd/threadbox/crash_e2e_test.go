package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// Acknowledged means answered: these tests SIGKILL the real binary with one turn running and two
// queued in a Slack thread, and require every acknowledged message to get its reply after a
// restart (or from the surviving replica).

// buildBinary builds threadbox once per test.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "threadbox")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// crashRig is a fake Slack, a Docker deployment of our own, and the env for serve.
type crashRig struct {
	fake *slackfake.Server
	env  []string
}

func newCrashRig(t *testing.T, dbURL string) *crashRig {
	t.Helper()
	prov := dockertest.New(t, docker.Options{})
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	dep := fmt.Sprintf("crash-e2e-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		list, _ := prov.List(context.Background(), map[string]string{sandbox.LabelDeployment: dep})
		for _, i := range list {
			_ = prov.Destroy(context.Background(), i.Handle)
		}
	})
	opts := fake.Options()
	env := append(os.Environ(),
		"THREADBOX_DATABASE_URL="+dbURL,
		"THREADBOX_RUNTIME_SECRET=crash-e2e-shared-runtime-secret",
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true",
		"THREADBOX_DEPLOYMENT="+dep,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE="+dockertest.Image(),
		"THREADBOX_SLACK_BOT_TOKEN="+opts.BotToken,
		"THREADBOX_SLACK_SIGNING_SECRET="+opts.SigningSecret,
		"THREADBOX_SLACK_API_URL="+fake.APIURL(),
		"THREADBOX_LIFECYCLE_LOOP_INTERVAL=1s",
		"THREADBOX_RUNTIME_NAME=shell",
	)
	return &crashRig{fake: fake, env: env}
}

func (c *crashRig) deliver(t *testing.T, s *server, ev slackfake.Event) {
	t.Helper()
	res, err := c.fake.Deliver(t.Context(), s.url+"/slack/events", ev)
	require.NoError(t, err)
	require.Equal(t, 200, res.Status, "acknowledged: %s", res.Body)
}

// waitThread waits until the thread's replies contain every one of want, in that order.
func (c *crashRig) waitThread(t *testing.T, root slackfake.Event, what string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	err := c.fake.Wait(ctx, func() bool { return inOrder(c.thread(root), want) })
	require.NoError(t, err, "%s; the thread has:\n%s", what, c.thread(root))
}

func (c *crashRig) thread(root slackfake.Event) string {
	var b strings.Builder
	for _, m := range c.fake.Replies(root.Channel, root.TS) {
		b.WriteString(m.Text + "\n")
	}
	return b.String()
}

// inOrder reports whether every want appears in s, each after the one before.
func inOrder(s string, want []string) bool {
	for _, w := range want {
		i := strings.Index(s, w)
		if i < 0 {
			return false
		}
		s = s[i+len(w):]
	}
	return true
}

func kill(t *testing.T, s *server) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		t.Fatal("serve did not die")
	}
}

// startBusyThread starts a turn that runs until killed, then queues two more behind it.
func (c *crashRig) startBusyThread(t *testing.T, s *server) slackfake.Event {
	t.Helper()
	root := c.fake.Mention("C1", "U1", "echo started-one; sleep 5; echo finished-one")
	c.deliver(t, s, root)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.fake.Wait(ctx, func() bool {
		for _, m := range c.fake.Replies("C1", root.TS) {
			if strings.Contains(m.Text, "started-one") {
				return true // the progress message shows the running command's output
			}
		}
		return false
	}), "the first turn runs")
	c.deliver(t, s, c.fake.Mention("C1", "U1", "echo answer-two", slackfake.InThread(root.TS)))
	c.deliver(t, s, c.fake.Mention("C1", "U1", "echo answer-three", slackfake.InThread(root.TS)))
	return root
}

func TestSIGKILLLosesNoAcknowledgedMessage(t *testing.T) {
	requireServices(t)
	bin := buildBinary(t)
	rig := newCrashRig(t, "sqlite:"+filepath.Join(t.TempDir(), "tb.db"))

	s := startServer(t, bin, rig.env)
	root := rig.startBusyThread(t, s)
	kill(t, s)

	s2 := startServer(t, bin, rig.env)
	rig.waitThread(t, root, "after a restart: the running turn is reported interrupted, the queued ones answered in order",
		"interrupted by a restart", "answer-two", "answer-three")
	require.NotContains(t, rig.thread(root), "finished-one", "an interrupted prompt is never run again on its own")

	rig.deliver(t, s2, rig.fake.Mention("C1", "U1", "retry", slackfake.InThread(root.TS)))
	rig.waitThread(t, root, "retry runs the interrupted prompt", "answer-three", "finished-one")
	require.NoError(t, s2.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-s2.done)
}

// TestSIGKILLReplicaTakeover: two replicas on one PostgreSQL; the one running the thread is killed,
// and the other answers its turns.
func TestSIGKILLReplicaTakeover(t *testing.T) {
	requireServices(t)
	bin := buildBinary(t)
	rig := newCrashRig(t, dbtest.PostgresSchemaURL(t))

	a := startServer(t, bin, rig.env)
	b := startServer(t, bin, rig.env)
	root := rig.startBusyThread(t, a)
	kill(t, a)

	rig.waitThread(t, root, "replica B answers what A acknowledged",
		"interrupted by a restart", "answer-two", "answer-three")
	rig.deliver(t, b, rig.fake.Mention("C1", "U1", "retry", slackfake.InThread(root.TS)))
	rig.waitThread(t, root, "retry on B", "answer-three", "finished-one")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-b.done)
}
