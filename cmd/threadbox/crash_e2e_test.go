package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db/dbtest"
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
	dep  string
}

func (c *crashRig) deployment() string { return c.dep }

func newCrashRig(t *testing.T, dbURL string) *crashRig {
	t.Helper()
	prov := dockertest.New(t, docker.Options{})
	fake := slackfake.New(slackfake.Options{})
	t.Cleanup(fake.Close)
	dep := fmt.Sprintf("crash-e2e-%d", time.Now().UnixNano())
	destroyDeployment(t, prov, dep)
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
	return &crashRig{fake: fake, env: env, dep: dep}
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

// thread is the bot's replies in root's thread (the users' own messages left out, since they quote
// the words the tests look for).
func (c *crashRig) thread(root slackfake.Event) string {
	var b strings.Builder
	for _, m := range c.fake.Replies(root.Channel, root.TS) {
		if m.BotID != "" {
			b.WriteString(m.Text + "\n")
		}
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
	// Sent the moment the new process listens: it runs after the turns the dead one queued.
	rig.deliver(t, s2, rig.fake.Mention("C1", "U1", "echo answer-four", slackfake.InThread(root.TS)))
	rig.waitThread(t, root, "after a restart: the running turn is reported interrupted, the queued ones answered in order, then the new one",
		"interrupted by a restart", "answer-two", "answer-three", "answer-four")
	require.NotContains(t, rig.thread(root), "finished-one", "an interrupted prompt is never run again on its own")

	rig.deliver(t, s2, rig.fake.Mention("C1", "U1", "retry", slackfake.InThread(root.TS)))
	rig.waitThread(t, root, "retry runs the interrupted prompt", "answer-four", "finished-one")
	require.NoError(t, s2.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-s2.done)
}

// TestSIGKILLLosesNoCommandReply: a command acknowledged to Slack whose reply was on its way when the
// process was killed is answered by the next process, with the answer the command gave.
func TestSIGKILLLosesNoCommandReply(t *testing.T) {
	requireServices(t)
	bin := buildBinary(t)
	rig := newCrashRig(t, "sqlite:"+filepath.Join(t.TempDir(), "tb.db"))
	s := startServer(t, bin, rig.env)

	hold := rig.fake.Hold("chat.postMessage", 1)
	defer hold.Release()
	root := rig.fake.Mention("C1", "U1", "status")
	rig.deliver(t, s, root)
	select {
	case <-hold.Waiting():
	case <-time.After(2 * time.Minute):
		t.Fatal("the status reply was never posted")
	}
	kill(t, s)
	select {
	case <-hold.Gone(): // the killed process's post is dropped, never recorded
	case <-time.After(time.Minute):
		t.Fatal("the fake did not see the killed process go")
	}
	require.Empty(t, rig.thread(root), "nothing was posted before the kill")

	s2 := startServer(t, bin, rig.env)
	rig.waitThread(t, root, "the next process posts the status reply the dead one had", "No sandbox yet")

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

// TestHostileAnswersThroughTheBinary: the real binary answers a 10 MB answer and the fence line that
// once made the splitter loop for ever, stays within a bounded memory, and answers the next message.
func TestHostileAnswersThroughTheBinary(t *testing.T) {
	requireServices(t)
	bin := buildBinary(t)
	rig := newCrashRig(t, "sqlite:"+filepath.Join(t.TempDir(), "tb.db"))
	s := startServer(t, bin, rig.env)

	fence := rig.fake.Mention("C1", "U1", `printf '`+"```"+`%s\n%s\n' "$(head -c 3492 /dev/zero | tr '\0' a)" x; echo fence-done`)
	rig.deliver(t, s, fence)
	rig.waitThread(t, fence, "the hostile fence line is answered", "fence-done")

	big := rig.fake.Mention("C1", "U1", `head -c 10000000 /dev/zero | tr '\0' b; echo; echo big-done`)
	rig.deliver(t, s, big)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	require.NoError(t, rig.fake.Wait(ctx, func() bool {
		return slices.Contains(rig.fake.Reactions("C1", big.TS), "white_check_mark")
	}), "the 10 MB answer is delivered")
	for _, m := range rig.fake.Replies("C1", big.TS) {
		require.LessOrEqual(t, len([]rune(m.Text)), 3500, "every message within Slack's limit")
	}

	next := rig.fake.Mention("C1", "U1", "echo still-here")
	rig.deliver(t, s, next)
	rig.waitThread(t, next, "the next message is answered", "still-here")

	peak := peakRSS(t, s.cmd.Process.Pid)
	t.Logf("peak resident memory of serve after a 10 MB answer: %d MiB", peak>>20)
	require.Less(t, peak, int64(1<<30), "memory stays bounded (the splitter once grew to 24 GB)")
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-s.done)
}

// peakRSS reads a process's peak resident set size (VmHWM) from /proc.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}
