package agentpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

func TestMaintainerConfigDefaultsAndValidation(t *testing.T) {
	def := MaintainerConfig{}.withDefaults()
	require.Equal(t, MaintainerConfig{
		IdleTimeout: 15 * time.Minute, PausedTTL: 72 * time.Hour, ReapGrace: 10 * time.Minute,
		StuckAfter: 10 * time.Minute, ReconcileGrace: 5 * time.Minute, Interval: time.Minute, PassTimeout: 30 * time.Second,
		BatchSize: 100,
	}, def)
	require.NoError(t, def.validate())

	tests := []struct {
		name string
		mod  func(*MaintainerConfig)
		want string // substring of the error naming the field; "" for valid
	}{
		{"custom values", func(c *MaintainerConfig) { c.IdleTimeout, c.BatchSize, c.ReapDryRun = time.Second, 1000, true }, ""},
		{"negative idle timeout", func(c *MaintainerConfig) { c.IdleTimeout = -time.Second }, "IdleTimeout (lifecycle.idle_timeout)"},
		{"negative paused ttl", func(c *MaintainerConfig) { c.PausedTTL = -1 }, "PausedTTL (lifecycle.paused_ttl)"},
		{"negative reap grace", func(c *MaintainerConfig) { c.ReapGrace = -1 }, "ReapGrace (lifecycle.reap_grace)"},
		{"negative stuck after", func(c *MaintainerConfig) { c.StuckAfter = -1 }, "StuckAfter (lifecycle.stuck_after)"},
		{"negative reconcile grace", func(c *MaintainerConfig) { c.ReconcileGrace = -1 }, "ReconcileGrace (lifecycle.reconcile_grace)"},
		{"negative interval", func(c *MaintainerConfig) { c.Interval = -1 }, "Interval"},
		{"negative pass timeout", func(c *MaintainerConfig) { c.PassTimeout = -1 }, "PassTimeout"},
		{"negative batch", func(c *MaintainerConfig) { c.BatchSize = -1 }, "BatchSize = -1"},
		{"batch over the store's cap", func(c *MaintainerConfig) { c.BatchSize = db.MaxBatch + 1 }, "BatchSize = 1001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c MaintainerConfig
			tt.mod(&c)
			err := c.withDefaults().validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestNewMaintainerRequiresDeps(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	prov := sandboxfake.New()
	for _, tt := range []struct {
		name string
		deps MaintainerDeps
		want string
	}{
		{"no store", MaintainerDeps{Provider: prov, Deployment: "d"}, "Store is required"},
		{"no provider", MaintainerDeps{Store: st, Deployment: "d"}, "Provider is required"},
		{"no deployment", MaintainerDeps{Store: st, Provider: prov}, "Deployment is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewMaintainer(MaintainerConfig{}, tt.deps)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err := NewMaintainer(MaintainerConfig{IdleTimeout: -1}, MaintainerDeps{Store: st, Provider: prov, Deployment: "d"})
	require.ErrorContains(t, err, "IdleTimeout")
	m, err := NewMaintainer(MaintainerConfig{}, MaintainerDeps{Store: st, Provider: prov, Deployment: "d"})
	require.NoError(t, err)
	require.Equal(t, DefaultIdleTimeout, m.Config().IdleTimeout)
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Second: "1m30s", 30 * time.Second: "30s",
		72 * time.Hour: "72h", time.Hour + time.Second: "1h0m1s",
	} {
		require.Equal(t, want, humanDuration(d), d)
	}
}

// fakeBox creates a sandbox on the fake provider for thread in deployment.
func fakeBox(t *testing.T, prov *sandboxfake.Provider, deployment, thread string) sandbox.Handle {
	t.Helper()
	h, err := prov.Create(context.Background(), sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: deployment, Thread: thread, Generation: 1}})
	require.NoError(t, err)
	return h
}

func TestIdlePassPausesOnlyIdleSessions(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		prov := sandboxfake.New()
		m := newTestMaintainer(t, MaintainerConfig{IdleTimeout: 15 * time.Minute, BatchSize: 2}, st, prov, "dep", clock, nil)

		// Five idle sessions with a batch size of 2 make the pass page through three batches.
		idle := map[string]sandbox.Handle{}
		for i := range 5 {
			th := fmt.Sprint("web:idle-", i)
			idle[th] = fakeBox(t, prov, "dep", th)
			activeSessionFor(t, st, th, idle[th])
		}
		clock.Advance(10 * time.Minute)
		fresh := fakeBox(t, prov, "dep", "web:fresh")
		activeSessionFor(t, st, "web:fresh", fresh)

		clock.Advance(5 * time.Minute) // exactly IdleTimeout after the idle ones' last activity: not yet
		rep, err := m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{}, rep)
		require.Zero(t, prov.Calls("Stop"))

		clock.Advance(time.Second)
		rep, err = m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 5, Done: 5}, rep)
		for th, h := range idle {
			s := sessionStatus(t, st, th)
			require.Equal(t, db.SessionPaused, s.Status, th)
			require.WithinDuration(t, clock.Now(), s.PausedAt, time.Millisecond, th)
			require.Equal(t, sandbox.StateStopped, prov.Box(h.ID).State, th)
		}
		require.Equal(t, db.SessionActive, sessionStatus(t, st, "web:fresh").Status)
		require.Equal(t, sandbox.StateRunning, prov.Box(fresh.ID).State)

		rep, err = m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{}, rep, "a second pass finds nothing to do")
	})
}

func TestIdlePassSkipsBusyThread(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		prov := sandboxfake.New()
		m := newTestMaintainer(t, MaintainerConfig{}, st, prov, "dep", clock, nil)
		h := fakeBox(t, prov, "dep", "web:busy")
		activeSessionFor(t, st, "web:busy", h)
		clock.Advance(time.Hour)

		unlock, err := st.LockThread(ctx, "web:busy") // a turn is running
		require.NoError(t, err)
		rep, err := m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 1, Skipped: 1}, rep)
		require.Equal(t, db.SessionActive, sessionStatus(t, st, "web:busy").Status)
		require.Zero(t, prov.Calls("Stop"))

		unlock()
		rep, err = m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 1, Done: 1}, rep)
		require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:busy").Status)
	})
}

func TestIdlePassStopFailures(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		prov := sandboxfake.New()
		flaky := &flakyProvider{Provider: prov}
		m := newTestMaintainer(t, MaintainerConfig{}, st, flaky, "dep", clock, nil)

		failing := fakeBox(t, prov, "dep", "web:a-failing")
		activeSessionFor(t, st, "web:a-failing", failing)
		gone := fakeBox(t, prov, "dep", "web:b-gone")
		activeSessionFor(t, st, "web:b-gone", gone)
		prov.RemoveOutOfBand(gone.ID)
		_, _, err := st.SessionCreate(ctx, db.NewSession{ThreadKey: "web:c-no-sandbox", Status: db.SessionActive})
		require.NoError(t, err)
		// A session in pausing was left by a pass that died between its two writes.
		half := fakeBox(t, prov, "dep", "web:d-half")
		activeSessionFor(t, st, "web:d-half", half)
		_, err = st.SessionTransition(ctx, "web:d-half", db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionPausing})
		require.NoError(t, err)

		flaky.failOnce("Stop", failing.ID, errors.New("engine hiccup"))
		clock.Advance(time.Hour)
		rep, err := m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, rep.Found)
		require.Equal(t, 3, rep.Done)
		require.Equal(t, 1, rep.Failed)
		require.ErrorContains(t, rep.Errors[0], "engine hiccup")

		s := sessionStatus(t, st, "web:a-failing")
		require.Equal(t, db.SessionActive, s.Status, "a failed stop goes back to active")
		require.Contains(t, s.LastError, "engine hiccup")
		require.WithinDuration(t, clock.Now(), s.LastActivityAt, time.Millisecond, "and waits a whole IdleTimeout before the next try")
		require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:b-gone").Status, "a vanished sandbox is recorded as destroyed")
		require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:c-no-sandbox").Status)
		require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:d-half").Status, "a half-done pause is finished")
		require.Equal(t, sandbox.StateStopped, prov.Box(half.ID).State)

		clock.Advance(time.Hour)
		rep, err = m.IdlePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 1, Done: 1}, rep)
		s = sessionStatus(t, st, "web:a-failing")
		require.Equal(t, db.SessionPaused, s.Status)
		require.Empty(t, s.LastError, "success clears the error")
	})
}

func TestCleanupPassDestroysAfterTTL(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		prov := sandboxfake.New()
		fp := &flakyProvider{Provider: prov}
		m := newTestMaintainer(t, MaintainerConfig{PausedTTL: 72 * time.Hour}, st, fp, "dep", clock, nil)
		pauseNow := func(th string) sandbox.Handle {
			h := fakeBox(t, prov, "dep", th)
			activeSessionFor(t, st, th, h)
			_, err := st.SessionTransition(ctx, th, db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionPaused})
			require.NoError(t, err)
			return h
		}
		old := pauseNow("web:old")
		flaky := pauseNow("web:flaky")
		clock.Advance(time.Hour)
		young := pauseNow("web:young")

		clock.Advance(71 * time.Hour) // exactly the TTL for old and flaky: not yet
		rep, err := m.CleanupPass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{}, rep)

		clock.Advance(time.Second)
		fp.failOnce("Destroy", old.ID, errors.New("volume busy"))
		rep, err = m.CleanupPass(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, rep.Found)
		require.Equal(t, 1, rep.Done)
		require.Equal(t, 1, rep.Failed)
		s := sessionStatus(t, st, "web:old")
		require.Equal(t, db.SessionDestroying, s.Status, "a failed destroy stays in destroying, to be retried")
		require.Contains(t, s.LastError, "volume busy")
		require.NotNil(t, prov.Box(old.ID))

		s = sessionStatus(t, st, "web:flaky")
		require.Equal(t, db.SessionDestroyed, s.Status)
		require.WithinDuration(t, clock.Now(), s.DestroyedAt, time.Millisecond)
		require.Equal(t, flaky.ID, s.SandboxID, "the record of the last sandbox is kept")
		require.Nil(t, prov.Box(flaky.ID))
		require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:young").Status)
		require.NotNil(t, prov.Box(young.ID))

		rep, err = m.CleanupPass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 1, Done: 1}, rep, "the next pass retries the destroy")
		s = sessionStatus(t, st, "web:old")
		require.Equal(t, db.SessionDestroyed, s.Status)
		require.Empty(t, s.LastError)
		require.Nil(t, prov.Box(old.ID))
	})
}

// flakyProvider fails chosen calls on chosen sandboxes, once each.
type flakyProvider struct {
	*sandboxfake.Provider
	mu   sync.Mutex // protects fail
	fail map[string]error
}

func (f *flakyProvider) failOnce(method, id string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]error{}
	}
	f.fail[method+" "+id] = err
}

func (f *flakyProvider) take(method, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.fail[method+" "+id]
	delete(f.fail, method+" "+id)
	return err
}

func (f *flakyProvider) Stop(ctx context.Context, h sandbox.Handle) error {
	if err := f.take("Stop", h.ID); err != nil {
		return err
	}
	return f.Provider.Stop(ctx, h)
}

func (f *flakyProvider) Destroy(ctx context.Context, h sandbox.Handle) error {
	if err := f.take("Destroy", h.ID); err != nil {
		return err
	}
	return f.Provider.Destroy(ctx, h)
}

// leakyLister is a provider whose List ignores the label filter, as a buggy provider might: the
// reaper's own label check must still keep it away from other deployments' sandboxes.
type leakyLister struct{ *sandboxfake.Provider }

func (l leakyLister) List(ctx context.Context, _ map[string]string) ([]sandbox.Info, error) {
	return l.Provider.List(ctx, nil)
}

func TestReapPass(t *testing.T) {
	for _, leaky := range []bool{false, true} {
		t.Run(fmt.Sprintf("leaky=%v", leaky), func(t *testing.T) {
			forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
				ctx := context.Background()
				fake := sandboxfake.New()
				fake.SetClock(clock.Now)
				var prov sandbox.Provider = fake
				if leaky {
					prov = leakyLister{fake}
				}
				m := newTestMaintainer(t, MaintainerConfig{ReapGrace: 10 * time.Minute}, st, prov, "dep", clock, nil)

				owned := fakeBox(t, fake, "dep", "web:owned")
				activeSessionFor(t, st, "web:owned", owned)
				pausedOwned := fakeBox(t, fake, "dep", "web:paused")
				activeSessionFor(t, st, "web:paused", pausedOwned)
				_, err := st.SessionTransition(ctx, "web:paused", db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionPaused})
				require.NoError(t, err)
				orphan := fakeBox(t, fake, "dep", "web:lost-row")
				stale := fakeBox(t, fake, "dep", "web:destroyed")
				activeSessionFor(t, st, "web:destroyed", stale)
				_, err = st.SessionTransition(ctx, "web:destroyed", db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionDestroyed})
				require.NoError(t, err)
				neighbour := fakeBox(t, fake, "other-dep", "web:neighbour")
				clock.Advance(5 * time.Minute)
				young := fakeBox(t, fake, "dep", "web:creating")
				clock.Advance(5*time.Minute + time.Second)

				rep, err := m.ReapPass(ctx, true)
				require.NoError(t, err)
				require.Equal(t, []string{orphan.ID, stale.ID}, infoIDs(rep.Orphans))
				require.Zero(t, rep.Destroyed)
				require.Zero(t, fake.Calls("Destroy"), "a dry run destroys nothing")
				require.Equal(t, 6, fake.Len())

				rep, err = m.ReapPass(ctx, false)
				require.NoError(t, err)
				require.Equal(t, []string{orphan.ID, stale.ID}, infoIDs(rep.Orphans))
				require.Equal(t, 2, rep.Destroyed)
				require.Nil(t, fake.Box(orphan.ID))
				require.Nil(t, fake.Box(stale.ID))
				for _, keep := range []sandbox.Handle{owned, pausedOwned, neighbour, young} {
					require.NotNil(t, fake.Box(keep.ID), keep.ID)
				}

				clock.Advance(10 * time.Minute)
				rep, err = m.ReapPass(ctx, false)
				require.NoError(t, err)
				require.Equal(t, []string{young.ID}, infoIDs(rep.Orphans), "the young one is reaped once past the grace")
				require.NotNil(t, fake.Box(neighbour.ID), "never another deployment's")
			})
		})
	}
}

func infoIDs(infos []sandbox.Info) []string {
	ids := []string{}
	for _, i := range infos {
		ids = append(ids, i.Handle.ID)
	}
	return ids
}

func TestWatchdogPass(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		startTurn := func(event string) db.Turn {
			tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "web:w", PlatformEventID: event, Prompt: "p"})
			require.NoError(t, err)
			tr, err = st.TurnStart(ctx, tr.ID, "")
			require.NoError(t, err)
			return tr
		}
		stuck := startTurn("e-stuck")
		racing := startTurn("e-racing") // finishes itself when the pool cancels it
		chatty := startTurn("e-chatty")
		clock.Advance(9 * time.Minute)
		require.NoError(t, st.TurnTouch(ctx, chatty.ID))

		var hooked []int64
		onStuck := func(ctx context.Context, tr db.Turn) {
			hooked = append(hooked, tr.ID)
			if tr.ID == racing.ID {
				_, err := st.TurnFinish(ctx, tr.ID, db.TurnResult{Status: db.TurnCancelled, Error: "cancelled by the pool"})
				require.NoError(t, err)
			}
		}
		m := newTestMaintainer(t, MaintainerConfig{StuckAfter: 10 * time.Minute}, st, sandboxfake.New(), "dep", clock, onStuck)

		clock.Advance(time.Minute) // exactly StuckAfter: not yet
		rep, err := m.WatchdogPass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{}, rep)

		clock.Advance(time.Second)
		rep, err = m.WatchdogPass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 2, Done: 2}, rep)
		require.ElementsMatch(t, []int64{stuck.ID, racing.ID}, hooked)

		got, err := st.TurnGet(ctx, stuck.ID)
		require.NoError(t, err)
		require.Equal(t, db.TurnFailed, got.Status)
		require.Equal(t, "no progress from the agent for 10m; aborted", got.Error)
		got, err = st.TurnGet(ctx, racing.ID)
		require.NoError(t, err)
		require.Equal(t, db.TurnCancelled, got.Status, "a turn that finished concurrently keeps its own end")
		got, err = st.TurnGet(ctx, chatty.ID)
		require.NoError(t, err)
		require.Equal(t, db.TurnRunning, got.Status)
	})
}
