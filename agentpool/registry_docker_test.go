package agentpool

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
)

// multiRig is one deployment with Docker (the default) and Daytona (its fake, on real Docker
// containers) enabled, on a real store.
type multiRig struct {
	dep   string
	st    db.Store
	clock *dbtest.Clock
	dock  sandbox.Provider
	day   sandbox.Provider
	fake  *daytonafake.Fake
	rt    *scriptRuntime
	// more are further enabled providers, after Daytona.
	more []sandbox.Provider
}

func newMultiRig(t *testing.T, st db.Store, clock *dbtest.Clock) *multiRig {
	t.Helper()
	r := &multiRig{dep: "tb-multi-" + maintRandom(), st: st, clock: clock}
	dock := maintDocker(t, r.dep)
	r.dock = dock
	// Whatever the test leaves on Docker under this deployment goes at the end (the pool never
	// destroys on shutdown).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		infos, err := dock.List(ctx, map[string]string{sandbox.LabelDeployment: r.dep})
		require.NoError(t, err)
		for _, in := range infos {
			require.NoError(t, dock.Destroy(ctx, in.Handle))
		}
	})
	r.fake = daytonafake.New(t, daytonafake.Options{Backend: maintDocker(t, ""), Snapshots: []string{maintTestImage}})
	t.Cleanup(func() { require.Empty(t, r.fake.Violations(), "requests that break Daytona's specs") })
	day, err := daytona.New(daytona.Options{APIURL: r.fake.APIURL(), APIKey: daytonafake.APIKey, Deployment: r.dep, StateTimeout: 2 * time.Minute})
	require.NoError(t, err)
	r.day = day
	// The runtime answers with the provider its sandbox is on, after a real exec in it.
	r.rt = &scriptRuntime{promptFunc: func(ctx context.Context, sb sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		var out strings.Builder
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"echo", "alive"}, Stdout: &out})
		if err != nil {
			return runtime.Result{}, err
		}
		if res.ExitCode != 0 {
			return runtime.Result{}, errors.New("exec failed")
		}
		return runtime.Result{Answer: sb.Handle().Provider + ":" + strings.TrimSpace(out.String())}, nil
	}}
	return r
}

func (r *multiRig) pool(t *testing.T) *Pool {
	t.Helper()
	p, err := New(Config{Deployment: r.dep, Image: maintTestImage,
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 0.5, PIDs: 64, ExecTimeout: time.Minute},
	}, Deps{Store: r.st, Provider: r.dock, Providers: append([]sandbox.Provider{r.day}, r.more...), Runtime: r.rt, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

func (r *multiRig) maintainer(t *testing.T) *Maintainer {
	t.Helper()
	m, err := NewMaintainer(MaintainerConfig{}, MaintainerDeps{
		Store: r.st, Provider: r.dock, Providers: []sandbox.Provider{r.day}, Deployment: r.dep,
		Logger: zaptest.NewLogger(t), Now: r.clock.Now,
	})
	require.NoError(t, err)
	m.lockWait = 20 * time.Millisecond
	return m
}

// turn runs one turn and returns its answer.
func turn(t *testing.T, p *Pool, thread, event, text string) Outcome {
	t.Helper()
	c := newCollector()
	submit(t, p, thread, event, text, c)
	out := c.wait(t, 1)[0]
	require.NoError(t, out.Err)
	return out
}

// TestManyProvidersDockerAndDaytona is issue 13's acceptance: one deployment with Docker and
// Daytona enabled; thread A on Docker, thread B on Daytona; "use daytona" moves A with its history,
// and the choice survives a restart; the reaper finds a labelled orphan on each provider; Daytona
// answering 500 does not stop the Docker passes.
func TestManyProvidersDockerAndDaytona(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		r := newMultiRig(t, st, clock)
		ctx := t.Context()
		p := r.pool(t)
		require.Equal(t, []string{"docker", "daytona"}, p.Providers())
		require.Equal(t, "docker", p.DefaultProvider())
		a, b, c := "test:A", "test:B", "test:C"

		// Thread A on the default, Docker.
		require.Equal(t, "docker:alive", turn(t, p, a, "a1", "hello from A").Answer)

		// Thread B picks Daytona before its first turn: nothing to move.
		ch, err := p.UseProvider(ctx, WorkspaceThread{ThreadKey: b, Platform: "test", ChannelID: "c", UserID: "u"}, "daytona")
		require.NoError(t, err)
		require.Equal(t, ProviderChange{ThreadKey: b, From: "docker", To: "daytona"}, ch)
		require.Equal(t, "daytona:alive", turn(t, p, b, "b1", "hello from B").Answer)
		sb := sessionStatus(t, st, b)
		require.Equal(t, "daytona", sb.Provider)
		require.Equal(t, db.SessionActive, sb.Status)

		// Only enabled providers.
		_, err = p.UseProvider(ctx, WorkspaceThread{ThreadKey: a, Platform: "test"}, "deno")
		var unknown *UnknownProviderError
		require.ErrorAs(t, err, &unknown)
		require.Equal(t, []string{"docker", "daytona"}, unknown.Enabled)

		// "use daytona" moves A: its Docker sandbox is destroyed, the next turn runs on Daytona with
		// the history replayed.
		before := sessionStatus(t, st, a)
		oldH, err := sandbox.DecodeHandle(before.Handle, "docker")
		require.NoError(t, err)
		ch, err = p.UseProvider(ctx, WorkspaceThread{ThreadKey: a, Platform: "test"}, "daytona")
		require.NoError(t, err)
		require.Equal(t, ProviderChange{ThreadKey: a, From: "docker", To: "daytona", Moved: true, OldSandbox: oldH.ID, Replay: true}, ch)
		_, err = r.dock.Inspect(ctx, oldH)
		require.ErrorIs(t, err, sandbox.ErrNotFound, "the Docker sandbox is destroyed")
		out := turn(t, p, a, "a2", "second from A")
		require.Equal(t, "daytona:alive", out.Answer)
		require.True(t, out.Replayed)
		prompts := r.rt.recorded()
		require.Contains(t, prompts[len(prompts)-1].History, "hello from A", "A's history is replayed on Daytona")
		after := sessionStatus(t, st, a)
		require.Equal(t, "daytona", after.Provider)
		require.Equal(t, before.Generation+1, after.Generation)
		ch, err = p.UseProvider(ctx, WorkspaceThread{ThreadKey: a, Platform: "test"}, "daytona")
		require.NoError(t, err)
		require.True(t, ch.Unchanged)

		// The choice is durable: a new pool (a restart) runs A on Daytona, in the same sandbox.
		require.NoError(t, p.Shutdown(ctx))
		p = r.pool(t)
		out = turn(t, p, a, "a3", "third from A")
		require.Equal(t, "daytona:alive", out.Answer)
		require.False(t, out.Recreated)
		require.Equal(t, after.SandboxID, sessionStatus(t, st, a).SandboxID)

		// Thread C stays on Docker (the default).
		require.Equal(t, "docker:alive", turn(t, p, c, "c1", "hello from C").Answer)

		// The reaper finds a labelled orphan on each provider.
		m := r.maintainer(t)
		spec := func(thread string) sandbox.Spec {
			return sandbox.Spec{Image: maintTestImage, Labels: sandbox.Labels{Deployment: r.dep, Thread: thread, Generation: 1},
				Resources: sandbox.Resources{MemoryMB: 512, CPUs: 0.5, PIDs: 64, ExecTimeout: time.Minute}}
		}
		orphanD, err := r.dock.Create(ctx, spec("orphan-docker"))
		require.NoError(t, err)
		orphanY, err := r.day.Create(ctx, spec("orphan-daytona"))
		require.NoError(t, err)
		clock.Advance(DefaultReapGrace + time.Minute)
		rep, err := m.ReapPass(ctx, false)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"docker/" + orphanD.ID, "daytona/" + orphanY.ID}, orphanKeys(rep.Orphans))
		require.Equal(t, 2, rep.Destroyed)
		require.Empty(t, rep.ListFailed)
		_, err = r.dock.Inspect(ctx, orphanD)
		require.ErrorIs(t, err, sandbox.ErrNotFound)
		_, err = r.day.Inspect(ctx, orphanY)
		require.ErrorIs(t, err, sandbox.ErrNotFound)

		// Daytona's API answers 500 to everything the passes ask of it: the Docker passes go on.
		orphanD, err = r.dock.Create(ctx, spec("orphan-docker-2"))
		require.NoError(t, err)
		clock.Advance(DefaultReapGrace + time.Minute)
		for _, op := range []string{"listSandboxes", "stopSandbox", "getSandbox"} {
			r.fake.Inject(daytonafake.Fault{Op: op, Status: http.StatusInternalServerError, Times: 1000})
		}
		rep, err = m.ReapPass(ctx, false)
		require.NoError(t, err, "one provider down does not fail the reaper")
		require.Equal(t, []string{"daytona"}, rep.ListFailed)
		require.Equal(t, []string{"docker/" + orphanD.ID}, orphanKeys(rep.Orphans))
		require.Equal(t, 1, rep.Destroyed)

		clock.Advance(DefaultIdleTimeout + time.Minute)
		idle, err := m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, db.SessionPaused, sessionStatus(t, st, c).Status, "the Docker thread is paused")
		require.Equal(t, 1, idle.Done)
		require.Equal(t, 1, idle.Failed, "the first Daytona session fails")
		require.Equal(t, 1, idle.Skipped, "the other is skipped, not waited on")
		require.ErrorIs(t, idle.Errors[0], sandbox.ErrUnavailable)
		for _, k := range []string{a, b} {
			s := sessionStatus(t, st, k)
			require.Equal(t, db.SessionActive, s.Status, "%s is left for the next pass", k)
		}
	})
}

func orphanKeys(infos []sandbox.Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.Handle.Provider + "/" + in.Handle.ID
	}
	return out
}
