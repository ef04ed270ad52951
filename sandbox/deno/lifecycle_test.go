package deno_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
)

var epoch = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func spec(t *testing.T, dep string) sandbox.Spec {
	return sandbox.Spec{Image: baseSnapshot, Labels: sandbox.Labels{Deployment: dep, Thread: "test:" + t.Name(), Generation: 1}}
}

// counts asserts how many volumes and snapshots the box has on the fake.
func counts(t *testing.T, f *denofake.Fake, h sandbox.Handle, volumes, snapshots int, msg string) {
	t.Helper()
	v, s := f.Counts(h.ID + "-")
	require.Equal(t, [2]int{volumes, snapshots}, [2]int{v, s}, "volumes and snapshots: %s", msg)
}

func state(t *testing.T, p *deno.Provider, h sandbox.Handle) sandbox.State {
	t.Helper()
	info, err := p.Inspect(t.Context(), h)
	require.NoError(t, err)
	return info.State
}

func cat(t *testing.T, p *deno.Provider, h sandbox.Handle, name string) string {
	t.Helper()
	data, err := p.ReadFile(t.Context(), h, name, 1<<20)
	require.NoError(t, err)
	return string(data)
}

// reap is the reaper's pass over a deployment: destroy whatever List returns.
func reap(t *testing.T, p *deno.Provider, dep string) {
	t.Helper()
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
	require.NoError(t, err)
	for _, info := range list {
		require.NoError(t, p.Destroy(t.Context(), info.Handle))
	}
	list, err = p.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
	require.NoError(t, err)
	require.Empty(t, list, "nothing left after the reaper's pass")
}

func create(t *testing.T, p *deno.Provider, sp sandbox.Spec) sandbox.Handle {
	t.Helper()
	h, err := p.Create(t.Context(), sp)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	return h
}

func TestPauseResumeKeepsWorkspace(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	ctx := t.Context()
	h := create(t, p, spec(t, "deno-pause"))
	counts(t, f, h, 1, 0, "running: the volume made from the base snapshot")
	require.NoError(t, p.WriteFile(ctx, h, "notes/one.txt", []byte("before the pause"), 0o644))

	for round := range 3 {
		require.NoError(t, p.Stop(ctx, h))
		require.Equal(t, sandbox.StateStopped, state(t, p, h))
		counts(t, f, h, 0, 1, "paused: the snapshot alone")
		require.Equal(t, 0, f.Running())

		require.NoError(t, p.Start(ctx, h))
		require.Equal(t, sandbox.StateRunning, state(t, p, h))
		counts(t, f, h, 1, 1, "resumed: a volume and the snapshot it was made from")
		require.Equal(t, "before the pause", cat(t, p, h, "notes/one.txt"), "round %d", round)
	}
	require.NoError(t, p.Destroy(ctx, h))
	counts(t, f, h, 0, 0, "destroyed")
	_, err := p.Inspect(ctx, h)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
}

func TestEnvSurvivesResume(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	sp := spec(t, "deno-env")
	sp.Env = map[string]string{"TB_KEPT": "yes"}
	h := create(t, p, sp)
	require.NoError(t, p.Stop(t.Context(), h))
	require.NoError(t, p.Start(t.Context(), h))
	var out strings.Builder
	res, err := p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"sh", "-c", "printf %s \"$TB_KEPT\""}, Stdout: &out})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, "yes", out.String(), "the spec's env is set again in the resumed sandbox")
}

// TestFailuresLeaveNothing injects a failure at each step of create, pause and resume; each leaves
// the box usable or gone, and the reaper's pass leaves nothing.
func TestFailuresLeaveNothing(t *testing.T) {
	cases := []struct {
		name  string
		step  string // create, pause, resume
		fault denofake.Fault
		check func(t *testing.T, p *deno.Provider, f *denofake.Fake, h sandbox.Handle)
	}{
		{name: "create: volume", step: "create", fault: denofake.Fault{Op: denofake.OpCreateVolume, Status: http.StatusInternalServerError, Times: 100}},
		{name: "create: boot", step: "create", fault: denofake.Fault{Op: denofake.OpCreateSandbox, Status: http.StatusInternalServerError}},
		{name: "pause: snapshot", step: "pause", fault: denofake.Fault{Op: denofake.OpSnapshotVolume, Status: http.StatusInternalServerError, Times: 1000},
			check: func(t *testing.T, p *deno.Provider, f *denofake.Fake, h sandbox.Handle) {
				counts(t, f, h, 1, 0, "the volume is kept when the snapshot fails")
				require.NoError(t, p.Start(t.Context(), h), "and boots again")
				require.Equal(t, "work", cat(t, p, h, "w.txt"))
			}},
		{name: "resume: volume", step: "resume", fault: denofake.Fault{Op: denofake.OpCreateVolume, Status: http.StatusBadRequest},
			check: func(t *testing.T, p *deno.Provider, f *denofake.Fake, h sandbox.Handle) {
				counts(t, f, h, 0, 1, "still paused")
				require.NoError(t, p.Start(t.Context(), h), "the next resume works")
				require.Equal(t, "work", cat(t, p, h, "w.txt"))
			}},
		{name: "resume: boot", step: "resume", fault: denofake.Fault{Op: denofake.OpCreateSandbox, Status: http.StatusInternalServerError},
			check: func(t *testing.T, p *deno.Provider, f *denofake.Fake, h sandbox.Handle) {
				counts(t, f, h, 0, 1, "the volume made for the boot is removed again")
				require.NoError(t, p.Start(t.Context(), h), "the next resume works")
				require.Equal(t, "work", cat(t, p, h, "w.txt"))
			}},
	}
	f := newFake(t, nil)
	p := newProvider(t, f, func(o *deno.Options) { o.DetachTimeout, o.Retries = 2*time.Second, 1 })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dep := "deno-fail-" + strings.ReplaceAll(strings.ReplaceAll(tc.name, ":", ""), " ", "-")
			sp := spec(t, dep)
			t.Cleanup(func() { f.Clear(tc.fault.Op) })
			if tc.step == "create" {
				f.Inject(tc.fault)
				_, err := p.Create(t.Context(), sp)
				require.Error(t, err)
				reap(t, p, dep)
				return
			}
			h, err := p.Create(t.Context(), sp)
			require.NoError(t, err)
			require.NoError(t, p.WriteFile(t.Context(), h, "w.txt", []byte("work"), 0o644))
			if tc.step == "resume" {
				require.NoError(t, p.Stop(t.Context(), h))
				f.Inject(tc.fault)
				require.Error(t, p.Start(t.Context(), h))
			} else {
				f.Inject(tc.fault)
				require.Error(t, p.Stop(t.Context(), h))
				drain(f, tc.fault.Op)
			}
			tc.check(t, p, f, h)
			reap(t, p, dep)
			counts(t, f, h, 0, 0, "after the reaper's pass")
		})
	}
}

// drain takes a remaining fault of op out of the way by clearing it with successful calls.
func drain(f *denofake.Fake, op string) { f.Clear(op) }

func TestConcurrencyLimit(t *testing.T) {
	f := newFake(t, func(o *denofake.Options) { o.MaxRunning = 1 })
	p := newProvider(t, f, nil)
	create(t, p, spec(t, "deno-limit"))
	_, err := p.Create(t.Context(), spec(t, "deno-limit"))
	require.ErrorIs(t, err, deno.ErrLimit)
	require.ErrorIs(t, err, sandbox.ErrNoEffect, "nothing is left of the refused create")
	require.True(t, strings.HasPrefix(err.Error(), "the limit of concurrently running Deno sandboxes is reached"), err.Error())
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: "deno-limit"})
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// TestLongTurnIsExtended: a command running past the sandbox's 30 minutes keeps it alive.
func TestLongTurnIsExtended(t *testing.T) {
	clock := denofake.NewClock(epoch)
	f := newFake(t, func(o *denofake.Options) { o.Clock = clock })
	p := newProvider(t, f, func(o *deno.Options) { o.Clock = clock })
	h := create(t, p, spec(t, "deno-long"))
	sid := f.SandboxIDs(deno.LabelBox, h.ID)[0]
	require.Equal(t, epoch.Add(30*time.Minute), f.Deadline(sid))

	timers := clock.Timers()
	type result struct {
		res sandbox.ExecResult
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out strings.Builder
		res, err := p.Exec(context.Background(), h, sandbox.ExecRequest{Cmd: []string{"sh", "-c", "while [ ! -e go ]; do sleep 0.05; done; echo finished"}, Stdout: &out})
		done <- result{res, out.String(), err}
	}()
	require.NoError(t, clock.AwaitTimers(t.Context(), timers+1), "the running command's lease arms its timer")
	extended := f.Await(denofake.OpExtend)
	clock.Advance(26 * time.Minute)
	<-extended
	require.Equal(t, epoch.Add(56*time.Minute), f.Deadline(sid), "extended by the full lifetime from now")
	clock.Advance(10 * time.Minute) // 36 minutes in: past the first deadline
	require.Equal(t, 1, f.Running(), "the sandbox outlived its first deadline")
	require.NoError(t, p.WriteFile(t.Context(), h, "go", nil, 0o644))
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 0, r.res.ExitCode)
	require.Equal(t, "finished\n", r.out, "the turn completes")
}

// TestIdleNearDeadlineIsPaused: Sweep pauses an idle sandbox before its deadline; the next turn
// resumes it with its files.
func TestIdleNearDeadlineIsPaused(t *testing.T) {
	clock := denofake.NewClock(epoch)
	f := newFake(t, func(o *denofake.Options) { o.Clock = clock })
	p := newProvider(t, f, func(o *deno.Options) { o.Clock = clock })
	h := create(t, p, spec(t, "deno-idle"))
	require.NoError(t, p.WriteFile(t.Context(), h, "kept", []byte("idle work"), 0o644))

	clock.Advance(20 * time.Minute)
	paused, err := p.Sweep(t.Context())
	require.NoError(t, err)
	require.Empty(t, paused, "ten minutes left: not yet")

	clock.Advance(8 * time.Minute)
	paused, err = p.Sweep(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{h.ID}, paused)
	require.Equal(t, sandbox.StateStopped, state(t, p, h))
	counts(t, f, h, 0, 1, "paused into its snapshot")

	clock.Advance(time.Hour) // long past the old deadline: nothing runs to expire
	require.NoError(t, p.Start(t.Context(), h), "the next turn resumes it")
	require.Equal(t, "idle work", cat(t, p, h, "kept"))
}

// TestExpiredIsStopped: a sandbox that reached its deadline anyway is stopped, and Start boots its
// volume again, with the files.
func TestExpiredIsStopped(t *testing.T) {
	clock := denofake.NewClock(epoch)
	f := newFake(t, func(o *denofake.Options) { o.Clock = clock })
	p := newProvider(t, f, func(o *deno.Options) { o.Clock = clock })
	h := create(t, p, spec(t, "deno-expired"))
	require.NoError(t, p.WriteFile(t.Context(), h, "kept", []byte("before expiry"), 0o644))

	clock.Advance(31 * time.Minute)
	require.Equal(t, sandbox.StateStopped, state(t, p, h))
	_, err := p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"true"}})
	require.ErrorIs(t, err, sandbox.ErrNotRunning)
	require.NoError(t, p.Start(t.Context(), h))
	require.Equal(t, "before expiry", cat(t, p, h, "kept"), "the expired sandbox's volume is resumed")
	counts(t, f, h, 1, 0, "booted from its own volume again")
}

func TestExpose(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	h := create(t, p, spec(t, "deno-expose"))
	url, err := p.ExposeHTTP(t.Context(), h, 4096)
	require.NoError(t, err, "both steps: the REST expose, then the RPC with its domain")
	require.Regexp(t, `^https://sbx-ord-[0-9a-z]+-1\.sandbox\.deno\.net$`, url)
	require.Equal(t, 1, f.Calls(denofake.OpExposeHTTP))

	cmd, err := p.AttachCommand(t.Context(), h, "bash")
	require.NoError(t, err)
	require.Equal(t, "ssh", cmd[0])
	require.Contains(t, cmd, "StrictHostKeyChecking=no")
	require.Regexp(t, `^app_[0-9a-z]+@ssh\.ord\.sandbox\.deno\.net$`, cmd[len(cmd)-2])
	require.Equal(t, "cd '/workspace' && exec bash", cmd[len(cmd)-1])

	require.NoError(t, p.Stop(t.Context(), h))
	_, err = p.ExposeHTTP(t.Context(), h, 4096)
	require.ErrorIs(t, err, sandbox.ErrNotRunning)
}

// TestSessionMissingReconnects: a socket that closed while the sandbox runs is only a missing
// session: the next call connects again (secondary connection) and works.
func TestSessionMissingReconnects(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	h := create(t, p, spec(t, "deno-reconnect"))
	require.NoError(t, p.Close(), "drops the sockets, never the sandboxes")
	require.Equal(t, 1, f.Running())
	require.NoError(t, p.WriteFile(t.Context(), h, "after", []byte("reconnected"), 0o644))
	require.Equal(t, "reconnected", cat(t, p, h, "after"))
	require.Equal(t, 1, f.Calls(denofake.OpConnect))
}

// TestTransientErrorsRetried: 5xx from the console are retried with backoff.
func TestTransientErrorsRetried(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	h := create(t, p, spec(t, "deno-retry"))
	f.Inject(denofake.Fault{Op: denofake.OpListSandboxes, Status: http.StatusServiceUnavailable, Times: 2})
	f.Inject(denofake.Fault{Op: denofake.OpListVolumes, Status: http.StatusBadGateway})
	require.Equal(t, sandbox.StateRunning, state(t, p, h))

	f.Inject(denofake.Fault{Op: denofake.OpListSandboxes, Status: http.StatusServiceUnavailable, Times: 100})
	_, err := p.Inspect(t.Context(), h)
	require.ErrorIs(t, err, sandbox.ErrUnavailable, "an outage that lasts is ErrUnavailable, not a missing sandbox")
	require.NotErrorIs(t, err, sandbox.ErrNotFound)
	f.Clear(denofake.OpListSandboxes)
}

func TestNetworkNoneSendsEmptyAllowNet(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	h := create(t, p, spec(t, "deno-net"))
	got := f.AllowNet(f.SandboxIDs(deno.LabelBox, h.ID)[0])
	require.NotNil(t, got, "network none: allow_net is sent")
	require.Empty(t, *got, "with no host in it")
	info, err := p.Inspect(t.Context(), h)
	require.NoError(t, err)
	require.Equal(t, sandbox.NetworkNone, info.Network)

	sp := spec(t, "deno-net")
	sp.Network = sandbox.NetworkFull
	full := create(t, p, sp)
	require.Nil(t, f.AllowNet(f.SandboxIDs(deno.LabelBox, full.ID)[0]), "network full: Deno's open network")
	info, err = p.Inspect(t.Context(), full)
	require.NoError(t, err)
	require.Equal(t, sandbox.NetworkFull, info.Network)
}
