package agentpool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestShutdownCutsARunningTurnAsInterrupted: a prompt under way when the shutdown grace ends has
// run, in part, with its side effects. Its user must hear that it was interrupted, and be able to
// run it again on purpose (retry finds it), not that the bot "did not run this; send it again".
func TestShutdownCutsARunningTurnAsInterrupted(t *testing.T) {
	started := make(chan struct{})
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, _ runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		close(started)
		<-ctx.Done()
		return runtime.Result{}, ctx.Err()
	}}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
	sink := newCollector()
	tk := submit(t, f.pool, "web:s", "e1", "deploy it", sink)
	<-started
	grace, cancel := context.WithCancel(t.Context())
	cancel() // the grace is over
	require.Error(t, f.pool.Shutdown(grace))

	out := sink.wait(t, 1)[0]
	require.ErrorIs(t, out.Err, ErrInterrupted)
	require.False(t, out.Cancelled)
	got, err := f.store.TurnLastFailedWith(t.Context(), "web:s", InterruptedText)
	require.NoError(t, err, "retry finds it")
	require.Equal(t, tk.TurnID, got.ID)
	require.Equal(t, db.TurnFailed, got.Status)
}
