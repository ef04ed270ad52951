package bot

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// signingRuntime answers every prompt under its own name, and says whether history was replayed.
type signingRuntime struct {
	minimalRuntime
	name string
}

func (r signingRuntime) Name() string { return r.name }
func (r signingRuntime) Prompt(_ context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
	answer := r.name + ": " + p.Text
	if p.History != "" {
		answer += " (with history)"
	}
	return runtime.Result{Answer: answer}, nil
}

// TestRuntimeCommandReplies runs "runtime" and "status" through the handler and a real pool with two
// runtimes enabled (claude-code the default, shell), on SQLite: each reply says what happened, and
// the turns run on the chosen runtime.
func TestRuntimeCommandReplies(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	prov := sandboxfake.NewNamed("docker")
	pool, err := agentpool.New(agentpool.Config{Deployment: "rt", Image: "img"}, agentpool.Deps{Store: st, Provider: prov,
		Runtime: signingRuntime{name: "claude-code"}, Runtimes: []runtime.Runtime{signingRuntime{name: "shell"}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	admin := NewAdmin(st, agentpool.Ops{Pool: pool}, []string{"slack:ADMIN"}, nil)
	h := NewHandler(HandlerConfig{ProgressInterval: time.Millisecond, Access: AccessPolicy{OwnerOnlyControls: true}}, pool, st, admin, nil)
	thread := SlackThread("T", "C", "1.1")
	n := 0
	say := func(user, text, want string) string {
		t.Helper()
		n++
		r := newChatReplier()
		require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, ChannelID: "C", User: User{ID: user}, Text: text, EventID: text + user + string(rune('a'+n))}, r))
		return r.waitPost(t, want)
	}

	require.Equal(t, `Write "runtime <name>" to pick the agent that works in this thread. Enabled runtimes: claude-code (default), shell.`,
		say("U", "runtime", "Enabled runtimes"))
	require.Equal(t, `There is no agent runtime "opencode" here. Enabled runtimes: claude-code (default), shell.`,
		say("U", "runtime opencode", "no agent runtime"))
	require.Contains(t, say("U", "status", "No sandbox yet"),
		"\nThis thread uses the claude-code runtime. Enabled runtimes: claude-code (default), shell. Switch with \"runtime <name>\".")

	// Before the first turn: the choice only.
	require.Equal(t, "This thread will use the shell runtime.", say("U", "Runtime Shell", "shell"))
	require.Contains(t, say("U", "status", "Sandbox:"), "\nThis thread uses the shell runtime.")
	require.Equal(t, "shell: build it", say("U", "build it", "shell: build it"))
	require.Equal(t, 1, prov.Len())

	// Later: a move, said so; the next turn runs on the new runtime with the history replayed.
	require.Equal(t, "Switched this thread from the shell runtime to claude-code: its sandbox was destroyed (with any files in it), "+
		"and the next message starts a new one for claude-code with the conversation so far replayed.", say("U", "runtime claude-code", "Switched"))
	require.Equal(t, 0, prov.Len(), "the old sandbox is destroyed")
	require.Contains(t, say("U", "status", "Sandbox:"), "\nThis thread uses the claude-code runtime.")
	require.Equal(t, "This thread already uses the claude-code runtime.", say("U", "runtime claude-code", "already"))
	require.Contains(t, say("U", "more", "claude-code: more"), "claude-code: more (with history)")
	require.Equal(t, 1, prov.Len())

	// Only the thread's starter (or an admin) may switch it.
	require.Equal(t, "Only the person who started this thread, or an admin, can change the runtime of it.", say("OTHER", "runtime shell", "Only"))
	require.NoError(t, h.Wait(t.Context()))
}

// TestRuntimeCommandWithOneRuntime: a bot with one runtime says there is nothing to choose, and status
// has no runtime line.
func TestRuntimeCommandWithOneRuntime(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	pool, err := agentpool.New(agentpool.Config{Deployment: "rt", Image: "img"},
		agentpool.Deps{Store: st, Provider: sandboxfake.NewNamed("docker"), Runtime: minimalRuntime{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	h := NewHandler(HandlerConfig{ProgressInterval: time.Millisecond}, pool, st, nil, nil)
	r := newChatReplier()
	require.NoError(t, h.Handle(t.Context(), Message{Thread: SlackThread("T", "C", "2.2"), ChannelID: "C", User: User{ID: "U"}, Text: "runtime shell", EventID: "e"}, r))
	require.Equal(t, `There is no agent runtime "shell" here. Enabled runtimes: minimal (default).`, r.waitPost(t, "no agent runtime"))
	require.NoError(t, h.Wait(t.Context()))
}
