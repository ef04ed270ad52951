package agentpool

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// Each lifecycle transition alone, on a real store and the fake provider.

func newTestLifecycle(t testing.TB, st db.Store, prov sandbox.Provider) *lifecycle {
	provs, err := newProviderSet(prov, nil)
	require.NoError(t, err)
	return &lifecycle{
		store: st, provs: provs, log: zaptest.NewLogger(t), maxResumeFailures: DefaultMaxResumeFailures,
		spec: func(s db.Session) sandbox.Spec {
			return sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "dep", Thread: s.ThreadKey, Generation: s.Generation}}
		},
	}
}

// box says what sandbox a test session starts with.
type box int

const (
	boxRunning box = iota
	boxStopped
	boxGone   // created, then removed behind our back
	boxFailed // the provider reports it broken
	boxNone   // the session never got a sandbox
	boxForeign
)

// sessionWith puts a session for thread in status, at generation 1, owning a sandbox as b says.
func sessionWith(t *testing.T, st db.Store, prov *sandboxfake.Provider, thread string, status db.SessionStatus, b box) (db.Session, sandbox.Handle) {
	t.Helper()
	ctx := context.Background()
	_, _, err := st.SessionCreate(ctx, db.NewSession{ThreadKey: thread, Platform: "test", Provider: prov.Name()})
	require.NoError(t, err)
	var h sandbox.Handle
	patch := db.SessionPatch{Generation: new(int64(1))}
	if b != boxNone {
		h = fakeBox(t, prov, "dep", thread)
		stored := h
		if b == boxForeign {
			stored.Provider = "elsewhere"
		}
		raw, err := sandbox.EncodeHandle(stored)
		require.NoError(t, err)
		patch.Handle, patch.SandboxID = raw, &h.ID
	}
	switch b {
	case boxStopped:
		prov.StopOutOfBand(h.ID)
	case boxGone:
		prov.RemoveOutOfBand(h.ID)
	case boxFailed:
		prov.SetState(h.ID, sandbox.StateFailed)
	}
	_, err = st.SessionUpdate(ctx, thread, patch)
	require.NoError(t, err)
	s, err := st.SessionTransition(ctx, thread, db.Transition{From: allStatuses, To: status})
	require.NoError(t, err)
	return s, h
}

func TestLifecyclePause(t *testing.T) {
	tests := []struct {
		name       string
		status     db.SessionStatus
		box        box
		stopErr    error
		wantStatus db.SessionStatus
		wantErr    error // nil: success
		wantState  sandbox.State
	}{
		{name: "running: stopped and paused", status: db.SessionActive, box: boxRunning, wantStatus: db.SessionPaused, wantState: sandbox.StateStopped},
		{name: "error: stopped and paused", status: db.SessionError, box: boxRunning, wantStatus: db.SessionPaused, wantState: sandbox.StateStopped},
		{name: "left resuming: stopped and paused", status: db.SessionResuming, box: boxRunning, wantStatus: db.SessionPaused, wantState: sandbox.StateStopped},
		{name: "sandbox gone: destroyed", status: db.SessionActive, box: boxGone, wantStatus: db.SessionDestroyed},
		{name: "no handle: destroyed", status: db.SessionActive, box: boxNone, wantStatus: db.SessionDestroyed},
		{name: "another provider's handle: destroyed", status: db.SessionActive, box: boxForeign, wantStatus: db.SessionDestroyed, wantState: sandbox.StateRunning},
		{name: "stop fails: back to active", status: db.SessionActive, box: boxRunning, stopErr: errors.New("engine hiccup"),
			wantStatus: db.SessionActive, wantErr: errors.New("engine hiccup"), wantState: sandbox.StateRunning},
		{name: "paused: no-op", status: db.SessionPaused, box: boxStopped, wantStatus: db.SessionPaused, wantState: sandbox.StateStopped},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, prov := newSQLiteStore(t), sandboxfake.New()
			cur, h := sessionWith(t, st, prov, "web:p", tc.status, tc.box)
			if tc.stopErr != nil {
				prov.FailNext("Stop", tc.stopErr)
			}
			got, err := newTestLifecycle(t, st, prov).pause(context.Background(), cur)
			if tc.wantErr != nil {
				require.ErrorContains(t, err, tc.wantErr.Error())
				require.Contains(t, got.LastError, tc.wantErr.Error())
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantStatus, got.Status)
			require.Equal(t, got, sessionStatus(t, st, "web:p"), "the returned session is the stored one")
			if tc.wantState != "" {
				require.Equal(t, tc.wantState, prov.Box(h.ID).State)
			}
		})
	}
}

func TestLifecycleDestroy(t *testing.T) {
	tests := []struct {
		name       string
		status     db.SessionStatus
		box        box
		destroyErr error
		wantStatus db.SessionStatus
		wantErr    bool
		wantBox    bool // the sandbox still exists afterwards
	}{
		{name: "running: destroyed", status: db.SessionActive, box: boxRunning, wantStatus: db.SessionDestroyed},
		{name: "paused: destroyed", status: db.SessionPaused, box: boxStopped, wantStatus: db.SessionDestroyed},
		{name: "sandbox already gone: success", status: db.SessionPaused, box: boxGone, wantStatus: db.SessionDestroyed},
		{name: "provider reports not found: success", status: db.SessionActive, box: boxRunning,
			destroyErr: fmt.Errorf("x: %w", sandbox.ErrNotFound), wantStatus: db.SessionDestroyed, wantBox: true},
		{name: "no handle: success", status: db.SessionError, box: boxNone, wantStatus: db.SessionDestroyed},
		{name: "another provider's handle: destroyed, left to the reaper", status: db.SessionActive, box: boxForeign,
			wantStatus: db.SessionDestroyed, wantBox: true},
		{name: "destroy fails: stays destroying", status: db.SessionActive, box: boxRunning, destroyErr: errors.New("volume busy"),
			wantStatus: db.SessionDestroying, wantErr: true, wantBox: true},
		{name: "destroyed: no-op", status: db.SessionDestroyed, box: boxGone, wantStatus: db.SessionDestroyed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, prov := newSQLiteStore(t), sandboxfake.New()
			cur, h := sessionWith(t, st, prov, "web:d", tc.status, tc.box)
			if tc.destroyErr != nil {
				prov.FailNext("Destroy", tc.destroyErr)
			}
			got, err := newTestLifecycle(t, st, prov).destroy(context.Background(), cur)
			if tc.wantErr {
				require.Error(t, err)
				require.Contains(t, sessionStatus(t, st, "web:d").LastError, tc.destroyErr.Error())
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantStatus, got.Status)
			require.Equal(t, tc.wantStatus, sessionStatus(t, st, "web:d").Status)
			if tc.box != boxNone {
				require.Equal(t, tc.wantBox, prov.Box(h.ID) != nil)
			}
		})
	}
}

func TestLifecycleReconcile(t *testing.T) {
	tests := []struct {
		name       string
		status     db.SessionStatus
		box        box
		wantStatus db.SessionStatus
		wantState  sandbox.State // "" : the sandbox no longer exists
	}{
		{"resuming, running: stopped, paused", db.SessionResuming, boxRunning, db.SessionPaused, sandbox.StateStopped},
		{"resuming, stopped: paused", db.SessionResuming, boxStopped, db.SessionPaused, sandbox.StateStopped},
		{"creating, running: stopped, paused", db.SessionCreating, boxRunning, db.SessionPaused, sandbox.StateStopped},
		{"creating, never got one: destroyed", db.SessionCreating, boxNone, db.SessionDestroyed, ""},
		{"error, running: stopped, paused", db.SessionError, boxRunning, db.SessionPaused, sandbox.StateStopped},
		{"error, gone: destroyed", db.SessionError, boxGone, db.SessionDestroyed, ""},
		{"pausing, running: paused", db.SessionPausing, boxRunning, db.SessionPaused, sandbox.StateStopped},
		{"resuming, failed: destroyed", db.SessionResuming, boxFailed, db.SessionDestroyed, ""},
		{"destroying: destroy finished", db.SessionDestroying, boxRunning, db.SessionDestroyed, ""},
		{"error, foreign handle: destroyed", db.SessionError, boxForeign, db.SessionDestroyed, sandbox.StateRunning},
		{"settled meanwhile: left alone", db.SessionActive, boxRunning, db.SessionActive, sandbox.StateRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, prov := newSQLiteStore(t), sandboxfake.New()
			cur, h := sessionWith(t, st, prov, "web:r", tc.status, tc.box)
			got, err := newTestLifecycle(t, st, prov).reconcile(context.Background(), cur)
			require.NoError(t, err)
			require.Equal(t, tc.wantStatus, got.Status)
			require.Equal(t, tc.wantStatus, sessionStatus(t, st, "web:r").Status)
			if tc.box == boxNone {
				return
			}
			if tc.wantState == "" {
				require.Nil(t, prov.Box(h.ID), "nothing left running")
			} else {
				require.Equal(t, tc.wantState, prov.Box(h.ID).State)
			}
		})
	}
}

// TestLifecycleFencing: a writer holding an older generation of the session (a stale turn or loop)
// cannot pause, destroy, resume or record over the newer sandbox.
func TestLifecycleFencing(t *testing.T) {
	ops := map[string]func(l *lifecycle, stale db.Session) error{
		"pause":   func(l *lifecycle, s db.Session) error { _, err := l.pause(context.Background(), s); return err },
		"destroy": func(l *lifecycle, s db.Session) error { _, err := l.destroy(context.Background(), s); return err },
		"markDestroyed": func(l *lifecycle, s db.Session) error {
			_, err := l.markDestroyed(context.Background(), s, "stale")
			return err
		},
		"record health": func(l *lifecycle, s db.Session) error {
			at := time.Now()
			_, err := l.record(context.Background(), s, &at, nil)
			return err
		},
		"record agent session": func(l *lifecycle, s db.Session) error {
			sid := "stale-agent"
			_, err := l.record(context.Background(), s, nil, &sid)
			return err
		},
		"resolve": func(l *lifecycle, s db.Session) error {
			_, err := l.resolve(context.Background(), s, nil)
			return err
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			st, prov := newSQLiteStore(t), sandboxfake.New()
			l := newTestLifecycle(t, st, prov)
			stale, old := sessionWith(t, st, prov, "web:f", db.SessionActive, boxRunning)
			// Meanwhile the thread got a new sandbox (generation 2), as after a recreate elsewhere.
			prov.RemoveOutOfBand(old.ID)
			r, err := l.resolve(context.Background(), stale, nil)
			require.NoError(t, err)
			require.Equal(t, int64(2), r.sess.Generation)
			current := sessionStatus(t, st, "web:f")

			err = op(l, stale)
			require.ErrorIs(t, err, db.ErrConflict)
			require.Equal(t, current, sessionStatus(t, st, "web:f"), "the newer generation's row is untouched")
			require.Equal(t, sandbox.StateRunning, prov.Box(r.sb.Handle().ID).State, "and so is its sandbox")
		})
	}
}

// TestReconcilePassSettlesCrashLeftovers: sessions a crash left between two states are settled by the
// next pass once older than the grace; younger ones and busy threads are left for later.
func TestReconcilePassSettlesCrashLeftovers(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		prov := sandboxfake.New()
		m := newTestMaintainer(t, MaintainerConfig{ReconcileGrace: 5 * time.Minute}, st, prov, "dep", clock, nil)
		// Long enough for Postgres to dial a lock connection under -race; the busy thread costs it once.
		m.lockWait = time.Second

		_, resuming := sessionWith(t, st, prov, "web:a-resuming", db.SessionResuming, boxRunning)
		sessionWith(t, st, prov, "web:b-creating", db.SessionCreating, boxNone)
		_, destroying := sessionWith(t, st, prov, "web:c-destroying", db.SessionDestroying, boxStopped)
		sessionWith(t, st, prov, "web:d-error-gone", db.SessionError, boxGone)
		_, busy := sessionWith(t, st, prov, "web:e-busy", db.SessionResuming, boxRunning)
		_, active := sessionWith(t, st, prov, "web:f-active", db.SessionActive, boxRunning)
		clock.Advance(5 * time.Minute)
		_, young := sessionWith(t, st, prov, "web:g-young", db.SessionResuming, boxRunning)

		unlock, err := st.LockThread(ctx, "web:e-busy") // a turn is working on it
		require.NoError(t, err)
		defer unlock()
		clock.Advance(time.Second)
		rep, err := m.ReconcilePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 5, Done: 4, Skipped: 1}, rep)

		require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:a-resuming").Status)
		require.Equal(t, sandbox.StateStopped, prov.Box(resuming.ID).State, "nothing is left running")
		require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:b-creating").Status)
		require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:c-destroying").Status)
		require.Nil(t, prov.Box(destroying.ID))
		require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:d-error-gone").Status)
		require.Equal(t, db.SessionResuming, sessionStatus(t, st, "web:e-busy").Status)
		require.Equal(t, sandbox.StateRunning, prov.Box(busy.ID).State)
		require.Equal(t, db.SessionActive, sessionStatus(t, st, "web:f-active").Status)
		require.Equal(t, sandbox.StateRunning, prov.Box(active.ID).State)
		require.Equal(t, db.SessionResuming, sessionStatus(t, st, "web:g-young").Status, "within the grace")
		require.Equal(t, sandbox.StateRunning, prov.Box(young.ID).State)

		rep, err = m.ReconcilePass(ctx)
		require.NoError(t, err)
		require.Equal(t, PassReport{Found: 1, Skipped: 1}, rep, "only the busy one is left")
	})
}

// TestFailedResumesRecreateWithHistory: once a thread's sandbox has failed to resume
// MaxResumeFailures times, the next turn destroys it and recreates it, replays the history, and says
// so in its Outcome.
func TestFailedResumesRecreateWithHistory(t *testing.T) {
	engineBusy := errors.New("engine busy")
	tests := []struct {
		name       string
		maxFails   int
		breakIt    func(prov *sandboxfake.Provider, rt *scriptRuntime, id string)
		failsFirst int // turns that fail before the recreate
	}{
		{
			name: "start fails three times", maxFails: 3, failsFirst: 3,
			breakIt: func(prov *sandboxfake.Provider, _ *scriptRuntime, id string) {
				prov.StopOutOfBand(id)
				for range 3 {
					prov.FailNext("Start", engineBusy)
				}
			},
		},
		{
			name: "runtime never comes up (default limit)", failsFirst: DefaultMaxResumeFailures,
			breakIt: func(_ *sandboxfake.Provider, rt *scriptRuntime, _ string) {
				rt.mu.Lock()
				defer rt.mu.Unlock()
				for range 2 * DefaultMaxResumeFailures { // two Ensures per turn
					rt.ensureErrs = append(rt.ensureErrs, engineBusy)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prov, rt := sandboxfake.New(), &scriptRuntime{}
			f := newFixture(t, newSQLiteStore(t), prov, rt, func(c *Config) { c.MaxResumeFailures = tc.maxFails })
			sink := newCollector()
			submit(t, f.pool, "web:rf", "e0", "first", sink)
			require.NoError(t, sink.wait(t, 1)[0].Err)
			old, err := f.store.SessionGet(context.Background(), "web:rf")
			require.NoError(t, err)

			tc.breakIt(prov, rt, old.SandboxID)
			for i := range tc.failsFirst {
				submit(t, f.pool, "web:rf", fmt.Sprint("f", i), "broken", sink)
				out := sink.wait(t, 1)[0]
				require.ErrorContains(t, out.Err, "engine busy", "failure %d is reported", i+1)
				require.Empty(t, out.Recreate)
				s, err := f.store.SessionGet(context.Background(), "web:rf")
				require.NoError(t, err)
				require.Equal(t, i+1, s.ResumeFailCount)
				require.Equal(t, old.Generation, s.Generation, "not recreated yet")
			}

			submit(t, f.pool, "web:rf", "e-last", "again", sink)
			out := sink.wait(t, 1)[0]
			require.NoError(t, out.Err)
			require.Equal(t, "echo: again", out.Answer)
			require.Equal(t, RecreateResumeFailed, out.Recreate, "the user is told why")
			require.True(t, out.Replayed)
			prompts := rt.recorded()
			require.Contains(t, prompts[len(prompts)-1].History, "User: first\nAssistant: echo: first", "history replayed")
			s, err := f.store.SessionGet(context.Background(), "web:rf")
			require.NoError(t, err)
			require.Equal(t, old.Generation+1, s.Generation)
			require.Equal(t, db.SessionActive, s.Status)
			require.Zero(t, s.ResumeFailCount)
			require.Nil(t, prov.Box(old.SandboxID), "the broken sandbox was destroyed, not leaked")
			require.Equal(t, 1, prov.Len())
		})
	}
}

// outageProvider is the fake provider behind a sandbox service that is down until a given time (the
// Docker daemon restarting): every lifecycle call fails with sandbox.ErrUnavailable until then.
type outageProvider struct {
	*sandboxfake.Provider
	only  string // "inspect", "start" or "create"
	until time.Time
}

func (o *outageProvider) down(method string) error {
	if method == o.only && time.Now().Before(o.until) {
		return fmt.Errorf("fake %s: connection refused: %w: %w", method, sandbox.ErrUnavailable, sandbox.ErrNoEffect)
	}
	return nil
}

func (o *outageProvider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	if err := o.down("inspect"); err != nil {
		return sandbox.Info{}, err
	}
	return o.Provider.Inspect(ctx, h)
}

func (o *outageProvider) Start(ctx context.Context, h sandbox.Handle) error {
	if err := o.down("start"); err != nil {
		return err
	}
	return o.Provider.Start(ctx, h)
}

func (o *outageProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	if err := o.down("create"); err != nil {
		return sandbox.Handle{}, err
	}
	return o.Provider.Create(ctx, spec)
}

// TestProviderOutageHoldsTheResolve: a resolve that meets an unavailable provider says it is waiting,
// retries with backoff, and goes on when the provider is back, or fails after ProviderWait with an
// error that still says "unavailable". The session is not counted as a failed resume. Fake time.
func TestProviderOutageHoldsTheResolve(t *testing.T) {
	tests := []struct {
		name    string
		box     box
		down    string // the one method that meets the outage
		outage  time.Duration
		wantErr bool
	}{
		{name: "inspect: back within the wait", box: boxRunning, down: "inspect", outage: 90 * time.Second},
		{name: "start: back within the wait", box: boxStopped, down: "start", outage: 30 * time.Second},
		{name: "create: back within the wait", box: boxGone, down: "create", outage: time.Minute},
		{name: "longer than the wait: fails", box: boxStopped, down: "start", outage: 3 * time.Minute, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, fake := newSQLiteStore(t), sandboxfake.New()
				cur, _ := sessionWith(t, st, fake, "web:o", db.SessionActive, tc.box)
				prov := &outageProvider{Provider: fake, only: tc.down, until: time.Now().Add(tc.outage)}
				l := newTestLifecycle(t, st, prov)
				l.providerWait = DefaultProviderWait
				notes := 0
				began := time.Now()
				r, err := l.resolve(context.Background(), cur, func() { notes++ })
				waited := time.Since(began)
				require.Equal(t, 1, notes, "the turn says once that it is waiting")
				s := sessionStatus(t, st, "web:o")
				require.Zero(t, s.ResumeFailCount, "an outage is no failed resume")
				if tc.wantErr {
					require.ErrorIs(t, err, sandbox.ErrUnavailable)
					require.Equal(t, DefaultProviderWait, waited, "it waits exactly provider_wait")
					return
				}
				require.NoError(t, err)
				require.Equal(t, db.SessionActive, r.sess.Status)
				require.GreaterOrEqual(t, waited, tc.outage)
				require.Less(t, waited, tc.outage+providerBackoffMax, "backoff is capped")
			})
		})
	}
}

// TestTurnWaitsOutProviderOutage: a turn that meets a provider outage tells the thread it is waiting
// for the sandbox service, then answers once the provider is back. Fake time.
func TestTurnWaitsOutProviderOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := sandboxfake.New()
		prov := &outageProvider{Provider: fake, only: "inspect"}
		f := newFixture(t, newSQLiteStore(t), prov, &scriptRuntime{})
		first := newCollector()
		submit(t, f.pool, "web:out", "e1", "first", first)
		require.NoError(t, first.wait(t, 1)[0].Err)

		prov.until = time.Now().Add(time.Minute) // the daemon restarts between two turns
		var notes []string
		sink := newCollector()
		wrapped := SinkFuncs{
			ProgressFunc: func(ev runtime.Event) {
				if ev.Kind == runtime.EventStatus {
					notes = append(notes, ev.Note)
				}
			},
			DeliverFunc: sink.Deliver,
		}
		submit(t, f.pool, "web:out", "e2", "second", wrapped)
		out := sink.wait(t, 1)[0]
		require.NoError(t, out.Err)
		require.Equal(t, "echo: second", out.Answer)
		require.Equal(t, []string{NoteWaitingForProvider}, notes)
	})
}

// TestLifecycleHealthyWarm: a warm turn's health check writes nothing when the session was recorded
// healthy less than healthRecordEvery ago with nothing to reset; an older record, or a failed-resume
// count to reset, is written.
func TestLifecycleHealthyWarm(t *testing.T) {
	ctx := context.Background()
	st, prov := newSQLiteStore(t), sandboxfake.New()
	l := newTestLifecycle(t, st, prov)
	sessionWith(t, st, prov, "web:h", db.SessionActive, boxRunning)
	t0 := time.Now().UTC().Truncate(time.Second)
	healthy := func(s db.Session, at time.Time) {
		t.Helper()
		if healthDue(s, at) {
			_, err := l.record(ctx, s, &at, nil)
			require.NoError(t, err)
		}
	}

	healthy(sessionStatus(t, st, "web:h"), t0) // never recorded: written
	recorded := sessionStatus(t, st, "web:h")
	require.True(t, recorded.LastHealthOKAt.Equal(t0))

	healthy(recorded, t0.Add(healthRecordEvery/2))
	require.Equal(t, recorded, sessionStatus(t, st, "web:h"), "a recent record is not written again")

	later := t0.Add(healthRecordEvery)
	healthy(recorded, later)
	require.True(t, sessionStatus(t, st, "web:h").LastHealthOKAt.Equal(later), "an old record is refreshed")

	_, err := st.SessionTransition(ctx, "web:h", db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionActive, ResumeFail: db.ResumeFailIncrement})
	require.NoError(t, err)
	failing := sessionStatus(t, st, "web:h")
	require.Equal(t, 1, int(failing.ResumeFailCount))
	healthy(failing, later.Add(time.Second))
	require.Zero(t, sessionStatus(t, st, "web:h").ResumeFailCount, "a failed-resume count is reset at once")
}

// TestLifecycleRecordTogether: health and the agent session id go down in one write, both kept; a
// record with neither writes nothing.
func TestLifecycleRecordTogether(t *testing.T) {
	ctx := context.Background()
	st, prov := newSQLiteStore(t), sandboxfake.New()
	l := newTestLifecycle(t, st, prov)
	sessionWith(t, st, prov, "web:rt", db.SessionActive, boxRunning)
	_, err := st.SessionTransition(ctx, "web:rt", db.Transition{From: []db.SessionStatus{db.SessionActive}, To: db.SessionActive, ResumeFail: db.ResumeFailIncrement})
	require.NoError(t, err)
	before := sessionStatus(t, st, "web:rt")

	same, err := l.record(ctx, before, nil, nil)
	require.NoError(t, err)
	require.Equal(t, before, same)
	require.Equal(t, before, sessionStatus(t, st, "web:rt"), "nothing to record, nothing written")

	at, sid := time.Now().UTC().Truncate(time.Second), "agent-7"
	got, err := l.record(ctx, before, &at, &sid)
	require.NoError(t, err)
	require.Equal(t, got, sessionStatus(t, st, "web:rt"), "the returned session is the row")
	require.True(t, got.LastHealthOKAt.Equal(at))
	require.Equal(t, sid, got.AgentSessionID)
	require.Zero(t, got.ResumeFailCount, "health resets the failed-resume count")
	require.Equal(t, before.Generation, got.Generation)
}
