package agentpool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// The pool's acceptance cases that apply to Deno, on the real pool, stores and shell runtime, with the
// Deno provider against denofake (whose sandboxes are Docker containers): pause to a snapshot and
// resume, cleanup, the reaper, and recreate with replay after failed resumes.

const denoBase = "tb-base"

type denoFixture struct {
	fake *denofake.Fake
	prov *deno.Provider
	dep  string
	rt   *recordingRuntime
}

func newDenoFixture(t *testing.T, clock ...*denofake.Clock) denoFixture {
	return newDenoFixtureWith(t, 0, clock...)
}

func newDenoFixtureWith(t *testing.T, maxRunning int, clock ...*denofake.Clock) denoFixture {
	t.Helper()
	fo := denofake.Options{Backend: dockertest.New(t, docker.Options{}), Image: dockertest.Image(), Snapshots: []string{denoBase}, MaxRunning: maxRunning}
	// BaseSnapshot serves pools whose image is not a snapshot (one deployment with Docker as well).
	po := deno.Options{Logger: zaptest.NewLogger(t), BaseSnapshot: denoBase}
	if len(clock) > 0 {
		fo.Clock, po.Clock = clock[0], clock[0]
	}
	f := denofake.New(t, fo)
	po.Token, po.ConsoleURL, po.SandboxURL = denofake.Token, f.ConsoleURL(), f.SandboxURL()
	p, err := deno.New(po)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	dep := "denopool-" + randomSuffix()
	t.Cleanup(func() { destroyDeployment(t, p, dep) })
	return denoFixture{fake: f, prov: p, dep: dep, rt: &recordingRuntime{Runtime: shellrt.New()}}
}

func (d denoFixture) pool(t *testing.T, st db.Store, prov sandbox.Provider, mod ...func(*Config)) *Pool {
	return newFixture(t, st, prov, d.rt, append([]func(*Config){func(c *Config) { c.Deployment, c.Image = d.dep, denoBase }}, mod...)...).pool
}

func (d denoFixture) counts(t *testing.T, h sandbox.Handle, volumes, snapshots int, msg string) {
	t.Helper()
	v, s := d.fake.Counts(h.ID + "-")
	require.Equal(t, [2]int{volumes, snapshots}, [2]int{v, s}, "volumes and snapshots: %s", msg)
}

func ask(t *testing.T, p *Pool, thread, event, text string) Outcome {
	t.Helper()
	sink := newCollector()
	submit(t, p, thread, event, text, sink)
	return sink.wait(t, 1)[0]
}

// settle runs an idempotent pass until it has done its one item: right after a turn's reply the
// thread's lock may still be held for a moment, and the pass skips a busy thread (each attempt waits
// for the lock briefly, so this loop is bounded by those waits, not by sleeps).
func settle(t *testing.T, pass func(context.Context) (PassReport, error)) {
	t.Helper()
	var rep PassReport
	for range 100 {
		var err error
		rep, err = pass(context.Background())
		require.NoError(t, err)
		if rep.Done == 1 {
			return
		}
		require.Equal(t, PassReport{Found: 1, Skipped: 1}, rep, "only a busy thread is worth another pass")
	}
	t.Fatalf("the pass never got the thread: %+v", rep)
}

func TestDenoIdlePauseResumeThenCleanup(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		d := newDenoFixture(t)
		pool := d.pool(t, st, d.prov)
		out := ask(t, pool, "web:deno-idle", "e1", "echo kept > kept.txt && echo written")
		require.NoError(t, out.Err)
		require.Equal(t, "written", out.Answer)
		h := mustHandle(t, sessionStatus(t, st, "web:deno-idle"))
		require.Equal(t, deno.Name, h.Provider)
		m := newTestMaintainer(t, MaintainerConfig{}, st, d.prov, d.dep, clock, nil)

		clock.Advance(DefaultIdleTimeout + time.Second)
		settle(t, m.IdlePass)
		requireState(t, d.prov, h, sandbox.StateStopped)
		require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:deno-idle").Status)
		d.counts(t, h, 0, 1, "paused: one snapshot")

		out = ask(t, pool, "web:deno-idle", "e2", "cat kept.txt")
		require.NoError(t, out.Err)
		require.Equal(t, "kept", out.Answer, "the next turn resumes the sandbox with its files")
		require.Equal(t, h, mustHandle(t, sessionStatus(t, st, "web:deno-idle")), "resumed, not recreated")
		d.counts(t, h, 1, 1, "resumed")

		clock.Advance(DefaultIdleTimeout + time.Second)
		settle(t, m.IdlePass)
		clock.Advance(DefaultPausedTTL + time.Second)
		settle(t, m.CleanupPass)
		_, err := d.prov.Inspect(ctx, h)
		require.ErrorIs(t, err, sandbox.ErrNotFound)
		require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:deno-idle").Status)
		d.counts(t, h, 0, 0, "destroyed: nothing left")
	})
}

func TestDenoReaperDestroysOrphansOnly(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		d := newDenoFixture(t)
		mk := func(thread string) sandbox.Handle {
			h, err := d.prov.Create(ctx, sandbox.Spec{Image: denoBase, Labels: sandbox.Labels{Deployment: d.dep, Thread: thread, Generation: 1}})
			require.NoError(t, err)
			return h
		}
		owned, orphan := mk("web:owned"), mk("web:orphan")
		activeSessionFor(t, st, "web:owned", owned)
		require.NoError(t, d.prov.Stop(ctx, orphan), "a paused orphan is found too")
		m := newTestMaintainer(t, MaintainerConfig{}, st, d.prov, d.dep, clock, nil)

		rep, err := m.ReapPass(ctx, false)
		require.NoError(t, err)
		require.Equal(t, 2, rep.Listed)
		require.Empty(t, rep.Orphans, "within the grace period nothing is an orphan yet")

		clock.Advance(DefaultReapGrace + time.Minute)
		rep, err = m.ReapPass(ctx, false)
		require.NoError(t, err)
		require.Equal(t, []string{orphan.ID}, infoIDs(rep.Orphans))
		require.Equal(t, 1, rep.Destroyed)
		d.counts(t, orphan, 0, 0, "the orphan's snapshot is gone")
		requireState(t, d.prov, owned, sandbox.StateRunning)
	})
}

// TestDenoResumeFailingRecreatesWithHistory: a paused thread whose resume fails (every boot refused)
// is destroyed by the next turn after max_resume_failures, which recreates it and replays the
// history; nothing of the old sandbox is left.
func TestDenoResumeFailingRecreatesWithHistory(t *testing.T) {
	clock := dbtest.NewClock(time.Now().UTC().Truncate(time.Millisecond))
	st := dbtest.OpenPostgres(t, db.WithClock(clock.Now))
	d := newDenoFixture(t)
	pool := d.pool(t, st, d.prov, func(c *Config) { c.MaxResumeFailures = 2 })
	out := ask(t, pool, "web:deno-rf", "e0", "echo first")
	require.NoError(t, out.Err)
	old := mustHandle(t, sessionStatus(t, st, "web:deno-rf"))
	m := newTestMaintainer(t, MaintainerConfig{}, st, d.prov, d.dep, clock, nil)
	clock.Advance(DefaultIdleTimeout + time.Second)
	settle(t, m.IdlePass)
	d.counts(t, old, 0, 1, "paused")

	for i := range 2 {
		// Every boot is refused while the fault lasts (a 4xx: a 5xx is an outage, which the pool waits
		// out instead of counting), however often the turn retries.
		d.fake.Inject(denofake.Fault{Op: denofake.OpCreateSandbox, Status: 400, Code: "INVALID_ROOT", Times: 100})
		out := ask(t, pool, "web:deno-rf", fmt.Sprint("f", i), "echo broken")
		d.fake.Clear(denofake.OpCreateSandbox)
		require.Error(t, out.Err)
		d.counts(t, old, 0, 1, "a failed resume leaves the paused state as it was")
	}
	out = ask(t, pool, "web:deno-rf", "e-last", "echo again")
	require.NoError(t, out.Err)
	require.Equal(t, "again", out.Answer)
	require.Equal(t, RecreateResumeFailed, out.Recreate)
	require.Contains(t, d.rt.last().History, "User: echo first\nAssistant: first", "history replayed")
	s := sessionStatus(t, st, "web:deno-rf")
	require.Equal(t, int64(2), s.Generation)
	_, err := d.prov.Inspect(t.Context(), old)
	require.ErrorIs(t, err, sandbox.ErrNotFound, "the broken sandbox was destroyed")
	d.counts(t, old, 0, 0, "with all its volumes and snapshots")
	d.counts(t, mustHandle(t, s), 1, 0, "the new one")
}

// TestDenoSweptSandboxResumesOnNextTurn: the provider pauses an idle sandbox nearing Deno's 30-minute
// deadline behind the pool's back (its session still says active); the next turn finds it stopped,
// resumes it and answers, with the files.
func TestDenoSweptSandboxResumesOnNextTurn(t *testing.T) {
	clock := denofake.NewClock(time.Now())
	d := newDenoFixture(t, clock)
	st := dbtest.OpenSQLite(t)
	pool := d.pool(t, st, d.prov)
	out := ask(t, pool, "web:deno-swept", "e1", "echo kept > kept.txt && echo written")
	require.NoError(t, out.Err)
	h := mustHandle(t, sessionStatus(t, st, "web:deno-swept"))

	clock.Advance(28 * time.Minute)
	paused, err := d.prov.Sweep(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{h.ID}, paused)
	requireState(t, d.prov, h, sandbox.StateStopped)

	out = ask(t, pool, "web:deno-swept", "e2", "cat kept.txt")
	require.NoError(t, out.Err)
	require.Equal(t, "kept", out.Answer)
	require.Equal(t, h, mustHandle(t, sessionStatus(t, st, "web:deno-swept")), "resumed, not recreated")
	requireState(t, d.prov, h, sandbox.StateRunning)
}

// TestDenoConcurrencyLimitIsAPlainReply: past Deno's limit of running sandboxes, a new thread's turn
// waits (provider_wait), then fails with its own code, which the bot turns into a plain reply; nothing
// is left of the refused create.
func TestDenoConcurrencyLimitIsAPlainReply(t *testing.T) {
	d := newDenoFixtureWith(t, 1)
	st := dbtest.OpenSQLite(t)
	pool := d.pool(t, st, d.prov, func(c *Config) { c.ProviderWait = 200 * time.Millisecond })
	out := ask(t, pool, "web:deno-first", "e1", "echo one")
	require.NoError(t, out.Err)
	out = ask(t, pool, "web:deno-second", "e2", "echo two")
	require.Error(t, out.Err)
	require.Equal(t, EPROVIDERBUSY, ErrorCode(out.Err))
	require.ErrorIs(t, out.Err, deno.ErrLimit)
	list, err := d.prov.List(t.Context(), map[string]string{sandbox.LabelDeployment: d.dep})
	require.NoError(t, err)
	require.Len(t, list, 1, "only the first thread's sandbox exists")
}
