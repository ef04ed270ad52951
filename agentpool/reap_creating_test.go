package agentpool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestReapPassKeepsSandboxOfCreateInFlight: a create slower than ReapGrace (a provider that builds
// the image, or waits long for the sandbox to start) has made its sandbox, but its session, still in
// creating, does not name it yet. The reaper keeps a sandbox whose labels name a session in creating
// at that generation while its creator holds the thread's lock: destroying it failed the turn, or
// left the session active on a deleted sandbox. A leftover of an older generation of that thread is
// still an orphan, and so is the sandbox of a create abandoned (the lock free, the row in creating).
func TestReapPassKeepsSandboxOfCreateInFlight(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		fake := sandboxfake.New()
		fake.SetClock(clock.Now)
		m := newTestMaintainer(t, MaintainerConfig{ReapGrace: 10 * time.Minute}, st, fake, "dep", clock, nil)

		const thread = "web:slow-create"
		_, _, err := st.SessionCreate(ctx, db.NewSession{ThreadKey: thread, Platform: "test", Provider: fake.Name()})
		require.NoError(t, err)
		s, err := st.SessionTransition(ctx, thread, db.Transition{From: allStatuses, To: db.SessionCreating, BumpGeneration: true})
		require.NoError(t, err)
		newBox := func(g int64) sandbox.Handle {
			h, err := fake.Create(ctx, sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "dep", Thread: thread, Generation: g}})
			require.NoError(t, err)
			return h
		}
		stale := newBox(s.Generation - 1) // an earlier failed create's leftover
		inFlight := newBox(s.Generation)
		clock.Advance(11 * time.Minute)
		unlock, err := st.LockThread(ctx, thread) // the creator, still in Create
		require.NoError(t, err)

		rep, err := m.ReapPass(ctx, false)
		require.NoError(t, err)
		require.Equal(t, []string{stale.ID}, infoIDs(rep.Orphans))
		require.NotNil(t, fake.Box(inFlight.ID), "the sandbox of the create in flight is kept")
		require.Nil(t, fake.Box(stale.ID))

		// The creator gave up (cancelled, or its process died): the row stays in creating.
		unlock()
		rep, err = m.ReapPass(ctx, false)
		require.NoError(t, err)
		require.Equal(t, []string{inFlight.ID}, infoIDs(rep.Orphans))
	})
}

// finishCreateStore finishes a create (saves its handle, as the creator does when Create returns)
// right after the reaper's ownership query read the session without it.
type finishCreateStore struct {
	db.Store
	finish func()
}

func (s *finishCreateStore) SessionsBySandboxIDs(ctx context.Context, ids []string) ([]db.Session, error) {
	ss, err := s.Store.SessionsBySandboxIDs(ctx, ids)
	if f := s.finish; f != nil {
		s.finish = nil
		f()
	}
	return ss, err
}

// TestReapPassKeepsSandboxWhoseCreateJustFinished: a create slower than ReapGrace (or a provider
// clock ahead of ours) finishes between the reaper's ownership query and its look at the session's
// row. The row then says active, owning the sandbox: the reaper took "not creating" for "abandoned"
// and destroyed the sandbox the turn had just got and was about to prompt in.
func TestReapPassKeepsSandboxWhoseCreateJustFinished(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := context.Background()
		fake := sandboxfake.New()
		fake.SetClock(clock.Now)
		wrapped := &finishCreateStore{Store: st}
		m := newTestMaintainer(t, MaintainerConfig{ReapGrace: 10 * time.Minute}, wrapped, fake, "dep", clock, nil)

		const thread = "web:create-finishes"
		_, _, err := st.SessionCreate(ctx, db.NewSession{ThreadKey: thread, Platform: "test", Provider: fake.Name()})
		require.NoError(t, err)
		s, err := st.SessionTransition(ctx, thread, db.Transition{From: allStatuses, To: db.SessionCreating, BumpGeneration: true})
		require.NoError(t, err)
		h, err := fake.Create(ctx, sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "dep", Thread: thread, Generation: s.Generation}})
		require.NoError(t, err)
		clock.Advance(11 * time.Minute)
		wrapped.finish = func() {
			raw, err := sandbox.EncodeHandle(h)
			require.NoError(t, err)
			_, err = st.SessionTransition(ctx, thread, db.Transition{
				From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive, IfGeneration: gen(s),
				Patch: db.SessionPatch{Handle: raw, SandboxID: &h.ID},
			})
			require.NoError(t, err)
		}

		rep, err := m.ReapPass(ctx, false)
		require.NoError(t, err)
		require.Empty(t, rep.Orphans)
		require.NotNil(t, fake.Box(h.ID), "the active session's new sandbox is kept")
	})
}
