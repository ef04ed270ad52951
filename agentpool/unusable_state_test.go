package agentpool

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// strictProvider decodes every handle's private state first, as the real providers do (docker,
// daytona): a handle it cannot read (written by a newer build, or broken) is sandbox.ErrInvalidSpec.
type strictProvider struct{ *sandboxfake.Provider }

func (p strictProvider) check(h sandbox.Handle) error {
	var st struct{}
	return h.DecodeState(p.Name(), 1, &st)
}

func (p strictProvider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	if err := p.check(h); err != nil {
		return sandbox.Info{}, err
	}
	return p.Provider.Inspect(ctx, h)
}

func (p strictProvider) Start(ctx context.Context, h sandbox.Handle) error {
	if err := p.check(h); err != nil {
		return err
	}
	return p.Provider.Start(ctx, h)
}

func (p strictProvider) Stop(ctx context.Context, h sandbox.Handle) error {
	if err := p.check(h); err != nil {
		return err
	}
	return p.Provider.Stop(ctx, h)
}

func (p strictProvider) Destroy(ctx context.Context, h sandbox.Handle) error {
	if err := p.check(h); err != nil {
		return err
	}
	return p.Provider.Destroy(ctx, h)
}

// TestUnreadableHandleStateIsUnusable: a handle that names an enabled provider but whose state that
// provider refuses (a newer handle version after a rollback, a broken state) made every call on it
// fail with ErrInvalidSpec: each message of the thread failed at the resolve, the idle pass put the
// session back to active every idle_timeout, cleanup and reconcile retried for ever, and the
// sandbox, owned by a live session, was never paused nor reaped. It is now an unusable handle, as
// an undecodable one is: the session is marked destroyed (the turn recreates), and the sandbox is
// left to the reaper.
func TestUnreadableHandleStateIsUnusable(t *testing.T) {
	tests := []struct {
		name   string
		status db.SessionStatus
		op     func(l *lifecycle, ctx context.Context, s db.Session) (db.Session, error)
		want   db.SessionStatus
	}{
		{"resolve", db.SessionActive, func(l *lifecycle, ctx context.Context, s db.Session) (db.Session, error) {
			r, err := l.resolve(ctx, s, nil)
			if err == nil {
				require.Equal(t, RecreateUnusable, r.recreate)
			}
			return r.sess, err
		}, db.SessionActive},
		{"pause", db.SessionActive, (*lifecycle).pause, db.SessionDestroyed},
		{"destroy", db.SessionPaused, (*lifecycle).destroy, db.SessionDestroyed},
		{"reconcile", db.SessionError, (*lifecycle).reconcile, db.SessionDestroyed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := newSQLiteStore(t)
			fake := sandboxfake.New()
			prov := strictProvider{fake}
			l := newTestLifecycle(t, st, prov)
			thread := "web:unreadable-" + tc.name
			_, h := sessionWith(t, st, fake, thread, tc.status, boxRunning)
			newer := h
			newer.Version = 9
			raw, err := json.Marshal(newer)
			require.NoError(t, err)
			s, err := st.SessionUpdate(ctx, thread, db.SessionPatch{Handle: raw})
			require.NoError(t, err)

			got, err := tc.op(l, ctx, s)
			require.NoError(t, err)
			require.Equal(t, tc.want, got.Status)
			require.Equal(t, tc.want, sessionStatus(t, st, thread).Status)
			if tc.want == db.SessionActive {
				require.NotEqual(t, h.ID, got.SandboxID, "a new sandbox")
			}
		})
	}
}
