package agentpool

import (
	"testing"

	"github.com/stretchr/testify/require"

	agentrt "github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db/dbtest"
)

// renamedRuntime is a runtime under another name: a second runtime a deployment enables.
type renamedRuntime struct {
	*recordingRuntime
	name string
}

func (r renamedRuntime) Name() string { return r.name }

// TestDockerRuntimeMove: on real containers, "runtime <name>" after a turn removes the thread's
// container; the next turn runs on the chosen runtime in a new container (the old files are gone),
// with the conversation so far replayed into it.
func TestDockerRuntimeMove(t *testing.T) {
	f := newDockerFixture(t, dbtest.OpenSQLite(t))
	alt := renamedRuntime{recordingRuntime: &recordingRuntime{Runtime: shellrt.New()}, name: "alt"}
	rts, err := newEnabledSet[agentrt.Runtime]("Runtime", f.pool.rts.def, []agentrt.Runtime{alt})
	require.NoError(t, err)
	f.fixture.pool.rts = rts
	ctx := t.Context()

	require.Equal(t, "first", turn(t, f.pool, "web:rt", "e1", "echo kept > f; echo first").Answer)
	boxes := f.sandboxes(t)
	require.Len(t, boxes, 1)
	old := boxes[0].Handle.ID

	ch, err := f.pool.UseRuntime(ctx, WorkspaceThread{ThreadKey: "web:rt", Platform: "web"}, "alt")
	require.NoError(t, err)
	require.True(t, ch.Moved)
	require.Equal(t, old, ch.OldSandbox)
	require.Empty(t, f.sandboxes(t), "the old runtime's container is removed")

	out := turn(t, f.pool, "web:rt", "e2", "cat f 2>/dev/null || echo new")
	require.Equal(t, "new", out.Answer, "a new container")
	require.True(t, out.Replayed)
	require.Contains(t, alt.last().History, "User: echo kept > f; echo first\nAssistant: first", "history replayed to the new runtime")
	f.rt.mu.Lock()
	oldPrompts := len(f.rt.prompts)
	f.rt.mu.Unlock()
	require.Equal(t, 1, oldPrompts, "the old runtime got no more prompts")
	boxes = f.sandboxes(t)
	require.Len(t, boxes, 1)
	require.NotEqual(t, old, boxes[0].Handle.ID)
}
