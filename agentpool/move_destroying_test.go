package agentpool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestMoveOfSessionWhoseResolveRecreates: asking a sandbox for unsaved work resolves it, and a
// session left destroying (an earlier destroy failed) is recreated by that resolve, at a new
// generation. The move then destroyed the session as read before, so the fenced write failed: the
// move reported an error after recording the new choice, and the sandbox made to be asked ran on.
func TestMoveOfSessionWhoseResolveRecreates(t *testing.T) {
	st, prov := newSQLiteStore(t), sandboxfake.New()
	ws := &chooserWS{current: map[string]string{"k": "app"}}
	p, err := New(Config{Deployment: "dep", Image: "img",
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 128, ExecTimeout: sandbox.ExecTimeoutRange[1]}},
		Deps{Store: st, Provider: prov, Runtime: &scriptRuntime{}, Logger: zaptest.NewLogger(t), Workspace: ws})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	_, old := sessionWith(t, st, prov, "k", db.SessionDestroying, boxRunning)

	r, err := moveNow(t, p, "k", "lib", false)
	require.NoError(t, err)
	require.True(t, r.Replaced)
	require.Equal(t, "lib", ws.get("k"))
	require.Nil(t, prov.Box(old.ID), "the old sandbox is destroyed")
	require.Zero(t, prov.Len(), "no sandbox is left running")
	require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "k").Status)
}
