package agentpool

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// A resolve that destroys the old sandbox before replacing it (the provider reports it failed, or it
// failed to resume too often) treats a Destroy answered ErrNotFound as done, as destroy and the move
// path do: the sandbox is gone, which is what the Destroy was for. Failing the turn instead left the
// thread failing every turn until reconcile noticed, one reconcile_grace later.
func TestResolveDestroyOfGoneSandboxRecreates(t *testing.T) {
	tests := []struct {
		name   string
		box    box
		fails  int
		reason RecreateReason
	}{
		{name: "failed sandbox gone meanwhile", box: boxFailed, reason: RecreateFailed},
		{name: "sandbox that failed to resume, gone", box: boxStopped, fails: DefaultMaxResumeFailures, reason: RecreateResumeFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, prov := newSQLiteStore(t), sandboxfake.New()
			_, h := sessionWith(t, st, prov, "web:g", db.SessionError, tc.box)
			for range tc.fails {
				_, err := st.SessionTransition(ctx, "web:g", db.Transition{
					From: []db.SessionStatus{db.SessionError}, To: db.SessionError, ResumeFail: db.ResumeFailIncrement,
				})
				require.NoError(t, err)
			}
			cur, err := st.SessionGet(ctx, "web:g")
			require.NoError(t, err)
			prov.FailNext("Destroy", fmt.Errorf("no such sandbox %s: %w", h.ID, sandbox.ErrNotFound))

			r, err := newTestLifecycle(t, st, prov).resolve(ctx, cur, nil)
			require.NoError(t, err)
			require.Equal(t, tc.reason, r.recreate)
			require.True(t, r.created)
			require.Equal(t, db.SessionActive, r.sess.Status)
			require.NotEqual(t, h.ID, r.sess.SandboxID)
		})
	}
}
