package shell

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/local"
)

// abortProviders are the providers the shell runtime runs on; the cloud ones on their fakes, whose
// sandboxes are containers of the busybox test image.
var abortProviders = []struct {
	name string
	open func(t *testing.T) (sandbox.Provider, string)
}{
	{"docker", func(t *testing.T) (sandbox.Provider, string) {
		return dockertest.New(t, docker.Options{}), dockertest.Image()
	}},
	{"local", func(t *testing.T) (sandbox.Provider, string) {
		p, err := local.New(local.Options{Dir: t.TempDir(), IUnderstandNoIsolation: true})
		require.NoError(t, err)
		return p, "host"
	}},
	{"daytona", func(t *testing.T) (sandbox.Provider, string) {
		fake := daytonafake.New(t, daytonafake.Options{
			Backend: dockertest.New(t, docker.Options{}), Snapshots: []string{dockertest.Image()},
			Deployment: "shellabort-" + strings.ToLower(rand.Text()[:8]),
		})
		p, err := daytona.New(daytona.Options{APIURL: fake.APIURL(), APIKey: daytonafake.APIKey,
			StateTimeout: 2 * time.Minute, Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		return p, dockertest.Image()
	}},
	{"deno", func(t *testing.T) (sandbox.Provider, string) {
		const base = "tb-base"
		fake := denofake.New(t, denofake.Options{Backend: dockertest.New(t, docker.Options{}), Image: dockertest.Image(),
			Snapshots: []string{base}})
		p, err := deno.New(deno.Options{Token: denofake.Token, ConsoleURL: fake.ConsoleURL(), SandboxURL: fake.SandboxURL(),
			Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		return p, base
	}},
}

// cutCases are the cut commands the abort tests stop: one with children in the background (one of
// them without the tag), one whose own process dropped the tag.
var cutCases = []struct {
	name    string
	command string
	pids    int
}{
	{"children in the background", cutCommand, 3},
	{"the command's process cleared its environment", execCutCommand, 1},
}

// eachCutSandbox runs f as a subtest for each cut command (cutCases) on each provider
// (abortProviders), on a fresh sandbox, within two minutes.
func eachCutSandbox(t *testing.T, f func(t *testing.T, ctx context.Context, sb sandbox.Sandbox, command string, pids int)) {
	for _, tc := range cutCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, pv := range abortProviders {
				t.Run(pv.name, func(t *testing.T) {
					sb := abortSandbox(t, pv.open)
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
					defer cancel()
					f(t, ctx, sb, tc.command, tc.pids)
				})
			}
		})
	}
}

// abortSandbox creates a sandbox on the provider open gives, removed when the test ends.
func abortSandbox(t *testing.T, open func(t *testing.T) (sandbox.Provider, string)) sandbox.Sandbox {
	t.Helper()
	p, image := open(t)
	h, err := p.Create(t.Context(), sandbox.Spec{Image: image, Labels: sandbox.Labels{Deployment: "shellabort", Thread: "t"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	return sandbox.Bind(p, h)
}

// TestAbortStopsTheCutCommandOnly: a command whose exec stream was cut runs on in the sandbox (the
// turn is reported interrupted), and a retry would run it again beside it; Abort, which the pool
// calls then, must stop it, the shell and what it started in the background alike (a child that
// cleared its environment too), on every provider; while what an earlier command of the same
// thread left running on purpose (a process in the background) lives on. Before, Abort did nothing and the cut command ran on.
func TestAbortStopsTheCutCommandOnly(t *testing.T) {
	eachCutSandbox(t, abortStopsTheCutCommand)
}

func abortStopsTheCutCommand(t *testing.T, ctx context.Context, sb sandbox.Sandbox, command string, pids int) {
	r := New()
	require.NoError(t, r.Ensure(ctx, sb))
	const sid = "shell-abort"

	// An earlier command leaves a process waiting at a fifo in the background, and exits.
	res, err := r.Prompt(ctx, sb, sid, runtime.Prompt{Text: `rm -f keep; mkfifo keep; cat keep >/dev/null 2>&1 & echo $!`}, nil)
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Answer)
	keep := strings.TrimSpace(res.Answer)
	t.Cleanup(func() { _, _ = sb.Exec(context.Background(), sandbox.ExecRequest{Cmd: []string{"kill", "-9", keep}}) })

	// The next is the cut command: it waits at another fifo, and its stream is cut.
	cs := runtimetest.NewCutExec(sb)
	cut := startCutOf(t, ctx, r, cs, sid, command, pids)

	require.NoError(t, r.Abort(ctx, sb, sid), "what the pool does with a cut turn")
	for _, pid := range cut {
		require.False(t, alive(t, sb, pid), "the cut command was stopped: pid %s", pid)
	}
	<-cs.Done // its exec ended with it
	require.True(t, alive(t, sb, keep), "the earlier command's background process lives on")
	require.NoError(t, r.Abort(ctx, sb, sid), "a second abort finds nothing to do")
	require.True(t, alive(t, sb, keep))
}

// alive tells, from a new exec, whether pid is a process in the sandbox that has not exited (a
// zombie waiting to be reaped has).
func alive(t *testing.T, sb sandbox.Sandbox, pid string) bool {
	t.Helper()
	var out strings.Builder
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
		Cmd:    []string{"/bin/sh", "-c", `s=$(cat /proc/$1/stat 2>/dev/null) || { echo gone; exit; }; s=${s##*) }; echo "${s%% *}"`, "sh", pid},
		Stdout: &out, Timeout: 30 * time.Second,
	})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode)
	state := strings.TrimSpace(out.String())
	require.NotEmpty(t, state)
	return state != "gone" && state != "Z"
}

// cutCommand waits at a fifo, with a child in the background and one that cleared its environment
// (env -i, as sudo does, so it carries no tag), and prints its pids on a first line.
const cutCommand = `rm -f gate; mkfifo gate; cat gate >/dev/null & a=$!; env -i /bin/sh -c 'exec cat gate >/dev/null' & echo "started $$ $a $!"; wait`

// startCut runs cutCommand on cs, cuts its exec stream once the pids are out, and returns them (the
// shell's, its child's, the env -i child's), each checked alive.
func startCut(t *testing.T, ctx context.Context, r *Runtime, cs *runtimetest.CutExec, sid string) []string {
	t.Helper()
	return startCutOf(t, ctx, r, cs, sid, cutCommand, 3)
}

// execCutCommand waits at a fifo as a process that replaced the command's shell and cleared its
// environment (exec env -i), so that no process of the run carries its tag; it prints its pid.
const execCutCommand = `rm -f gate; mkfifo gate; echo "started $$"; exec env -i cat gate`

// startCutOf is startCut for command, which prints n pids.
func startCutOf(t *testing.T, ctx context.Context, r *Runtime, cs *runtimetest.CutExec, sid, command string, n int) []string {
	t.Helper()
	var mu sync.Mutex
	var out strings.Builder
	_, err := r.Prompt(ctx, cs, sid, runtime.Prompt{Text: command}, func(e runtime.Event) {
		mu.Lock()
		defer mu.Unlock()
		out.WriteString(e.Text)
		if strings.Contains(out.String(), "\n") {
			cs.Cut()
		}
	})
	require.ErrorIs(t, err, runtime.ErrPromptCut)
	mu.Lock()
	cut := strings.Fields(strings.TrimPrefix(strings.TrimSpace(out.String()), "started "))
	mu.Unlock()
	require.Len(t, cut, n, "the command's pids: %q", out.String())
	for _, pid := range cut {
		require.True(t, alive(t, cs.Sandbox, pid), "the cut command runs on: pid %s", pid)
	}
	return cut
}

// TestFailedAbortIsFinishedBeforeTheNextCommand: an Abort that could not finish (its deadline passed)
// leaves the cut command running; the session's next command (a retry, often) stops it before it
// starts, rather than run beside it. Before, the next command replaced the cut one's tag, and it was
// never looked for again.
func TestFailedAbortIsFinishedBeforeTheNextCommand(t *testing.T) {
	box := abortSandbox(t, abortProviders[0].open) // Docker
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := New()
	require.NoError(t, r.Ensure(ctx, box))
	const sid = "shell-abort-left"
	cs := runtimetest.NewCutExec(box)
	cut := startCut(t, ctx, r, cs, sid)

	gone, end := context.WithCancel(ctx)
	end()
	require.Error(t, r.Abort(gone, box, sid), "an abort out of time")
	for _, pid := range cut {
		require.True(t, alive(t, box, pid), "still running after the failed abort: pid %s", pid)
	}

	res, err := r.Prompt(ctx, box, sid, runtime.Prompt{Text: "echo next"}, nil)
	require.NoError(t, err)
	require.Contains(t, res.Answer, "next")
	for _, pid := range cut {
		require.False(t, alive(t, box, pid), "stopped before the next command: pid %s", pid)
	}
	<-cs.Done
	require.NoError(t, r.Abort(ctx, box, sid), "nothing left to abort")
}

// TestCommandLeftRunningByACrashIsStoppedFirst: a command whose exec was cut as the bot crashed runs
// on, and the bot that comes back (a new runtime, which knows no tag) is asked to run the session's
// next command, often the user's "retry": the cut command is stopped before it starts, not run beside
// it, on every provider. A previous command that exited is left alone with what it left in the
// background on purpose. Before, the cut command ran on beside the retry.
func TestCommandLeftRunningByACrashIsStoppedFirst(t *testing.T) {
	eachCutSandbox(t, leftRunningByACrash)
}

func leftRunningByACrash(t *testing.T, ctx context.Context, box sandbox.Sandbox, command string, pids int) {
	const sid = "shell-crash"
	before := New()
	require.NoError(t, before.Ensure(ctx, box))
	cs := runtimetest.NewCutExec(box)
	cut := startCutOf(t, ctx, before, cs, sid, command, pids)

	after := New() // the bot after its restart
	require.NoError(t, after.Ensure(ctx, box))
	res, err := after.Prompt(ctx, box, sid, runtime.Prompt{Text: `rm -f keep; mkfifo keep; cat keep >/dev/null 2>&1 & echo $!`}, nil)
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Answer)
	for _, pid := range cut {
		require.False(t, alive(t, box, pid), "stopped before the next command: pid %s", pid)
	}
	<-cs.Done
	keep := strings.TrimSpace(res.Answer)
	t.Cleanup(func() { _, _ = box.Exec(context.Background(), sandbox.ExecRequest{Cmd: []string{"kill", "-9", keep}}) })

	// That command exited, leaving a process in the background: the next bot's command
	// leaves it be.
	res, err = New().Prompt(ctx, box, sid, runtime.Prompt{Text: "echo next"}, nil)
	require.NoError(t, err)
	require.Equal(t, "next", strings.TrimSpace(res.Answer))
	require.True(t, alive(t, box, keep), "the exited command's background process lives on")
}
