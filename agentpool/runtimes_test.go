package agentpool

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// namedRuntime is a scriptRuntime under a name of its own that signs its answers, so a test sees
// which runtime answered.
type namedRuntime struct {
	*scriptRuntime
	name string
}

func (r namedRuntime) Name() string { return r.name }

func newNamedRuntime(name string) namedRuntime {
	return namedRuntime{name: name, scriptRuntime: &scriptRuntime{promptFunc: func(_ context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		return runtime.Result{Answer: name + ": " + p.Text}, nil
	}}}
}

func newRuntimesPool(t *testing.T, st db.Store, prov sandbox.Provider, def runtime.Runtime, more ...runtime.Runtime) *Pool {
	t.Helper()
	p, err := New(Config{Deployment: "dep", Image: "img"},
		Deps{Store: st, Provider: prov, Runtime: def, Runtimes: more, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

// TestRuntimeChoiceBeforeTheFirstTurn: "runtime <name>" before any turn only records the choice; the
// first turn runs on it, and other threads keep the default.
func TestRuntimeChoiceBeforeTheFirstTurn(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, _ *dbtest.Clock) {
		ctx := t.Context()
		prov := sandboxfake.NewNamed("docker")
		claude, shell := newNamedRuntime("claude"), newNamedRuntime("shell")
		p := newRuntimesPool(t, st, prov, claude, shell)
		require.Equal(t, []string{"claude", "shell"}, p.Runtimes())
		require.Equal(t, "claude", p.DefaultRuntime())

		ch, err := p.UseRuntime(ctx, WorkspaceThread{ThreadKey: "a", Platform: "test"}, "shell")
		require.NoError(t, err)
		require.Equal(t, RuntimeChange{ThreadKey: "a", From: "claude", To: "shell"}, ch)
		require.Equal(t, 0, prov.Len(), "no sandbox is made for a choice")
		require.Equal(t, "shell", sessionStatus(t, st, "a").Runtime)

		require.Equal(t, "shell: one", turn(t, p, "a", "e1", "one").Answer)
		require.Equal(t, "claude: hi", turn(t, p, "b", "e2", "hi").Answer, "another thread keeps the default")
		require.Len(t, claude.recorded(), 1)
		require.Len(t, shell.recorded(), 1)

		v, _, err := p.view(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, "shell", v.Runtime)

		before := sessionStatus(t, st, "a")
		ch, err = p.UseRuntime(ctx, WorkspaceThread{ThreadKey: "a", Platform: "test"}, "shell")
		require.NoError(t, err)
		require.True(t, ch.Unchanged)
		after := sessionStatus(t, st, "a")
		require.Equal(t, before.SandboxID, after.SandboxID, "choosing the runtime a thread has keeps its sandbox")
		require.Equal(t, before.Status, after.Status)
		require.Equal(t, 2, prov.Len())
	})
}

// TestRuntimeMoveReplaysTheHistory: after turns on one runtime, "runtime <name>" destroys the
// thread's sandbox; the next turn runs on the chosen runtime in a new sandbox, with the conversation
// so far replayed into it.
func TestRuntimeMoveReplaysTheHistory(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, _ *dbtest.Clock) {
		ctx := t.Context()
		prov := sandboxfake.NewNamed("docker")
		claude, shell := newNamedRuntime("claude"), newNamedRuntime("shell")
		p := newRuntimesPool(t, st, prov, claude, shell)

		require.Equal(t, "claude: first", turn(t, p, "t", "e1", "first").Answer)
		old := sessionStatus(t, st, "t")
		require.Equal(t, 1, prov.Len())

		ch, err := p.UseRuntime(ctx, WorkspaceThread{ThreadKey: "t", Platform: "test"}, "shell")
		require.NoError(t, err)
		require.Equal(t, RuntimeChange{ThreadKey: "t", From: "claude", To: "shell", Moved: true, OldSandbox: old.SandboxID, Replay: true}, ch)
		s := sessionStatus(t, st, "t")
		require.Equal(t, db.SessionDestroyed, s.Status, "the old runtime's sandbox is gone")
		require.Equal(t, "shell", s.Runtime)
		require.Equal(t, 0, prov.Len())

		out := turn(t, p, "t", "e2", "second")
		require.Equal(t, "shell: second", out.Answer, "the next turn runs on the chosen runtime")
		require.True(t, out.Replayed)
		prompts := shell.recorded()
		require.Len(t, prompts, 1)
		require.Contains(t, prompts[0].History, "User: first\nAssistant: claude: first", "history replayed")
		require.Len(t, claude.recorded(), 1, "the old runtime gets no more prompts")
		now := sessionStatus(t, st, "t")
		require.NotEqual(t, old.SandboxID, now.SandboxID)
		require.Equal(t, 1, prov.Len())

		// And back: the choice moves the thread again, with both turns replayed.
		_, err = p.UseRuntime(ctx, WorkspaceThread{ThreadKey: "t", Platform: "test"}, "claude")
		require.NoError(t, err)
		require.Equal(t, "claude: third", turn(t, p, "t", "e3", "third").Answer)
		require.Contains(t, claude.recorded()[1].History, "Assistant: shell: second")
	})
}

// TestRuntimeMoveFinishedAfterAFailedDestroy: if the old sandbox cannot be destroyed at the move,
// the choice is still recorded with the session left destroying, and the next turn finishes the
// destroy and runs on the new runtime: never in the old runtime's sandbox.
func TestRuntimeMoveFinishedAfterAFailedDestroy(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, _ *dbtest.Clock) {
		ctx := t.Context()
		prov := sandboxfake.NewNamed("docker")
		claude, shell := newNamedRuntime("claude"), newNamedRuntime("shell")
		p := newRuntimesPool(t, st, prov, claude, shell)
		require.Equal(t, "claude: first", turn(t, p, "t", "e1", "first").Answer)

		prov.FailNext("Destroy", errors.New("engine hiccup"))
		ch, err := p.UseRuntime(ctx, WorkspaceThread{ThreadKey: "t", Platform: "test"}, "shell")
		require.ErrorContains(t, err, "engine hiccup")
		require.True(t, ch.Moved)
		s := sessionStatus(t, st, "t")
		require.Equal(t, "shell", s.Runtime)
		require.Equal(t, db.SessionDestroying, s.Status)

		out := turn(t, p, "t", "e2", "second")
		require.Equal(t, "shell: second", out.Answer)
		require.True(t, out.Replayed)
		require.Equal(t, RecreateDestroying, out.Recreate, "the turn finished the destroy, never reviving the old sandbox")
		require.Equal(t, 1, prov.Len(), "the old sandbox was destroyed, a new one made")
	})
}

// TestRuntimeChoiceRefusesWhatIsNotEnabled: an unknown runtime is refused with the list of those
// enabled, the default first, and nothing is recorded.
func TestRuntimeChoiceRefusesWhatIsNotEnabled(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	p := newRuntimesPool(t, st, sandboxfake.NewNamed("docker"), newNamedRuntime("claude"), newNamedRuntime("shell"))
	_, err := p.UseRuntime(t.Context(), WorkspaceThread{ThreadKey: "t", Platform: "test"}, "codex")
	var unknown *UnknownRuntimeError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, &UnknownRuntimeError{Name: "codex", Enabled: []string{"claude", "shell"}}, unknown)
	_, err = st.SessionGet(t.Context(), "t")
	require.ErrorIs(t, err, db.ErrNotFound)

	_, err = New(Config{Deployment: "dep", Image: "img"}, Deps{Store: st, Provider: sandboxfake.NewNamed("docker"),
		Runtime: newNamedRuntime("claude"), Runtimes: []runtime.Runtime{newNamedRuntime("claude")}})
	require.ErrorContains(t, err, `two runtimes are named "claude"`)
}
