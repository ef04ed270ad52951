package agentpool

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno"
)

// TestUseDenoBesideDockerAndDaytona is issue 14's acceptance: Deno (on denofake) sits beside Docker
// (the default) and Daytona (on daytonafake) in one deployment, and "use deno" (Pool.UseProvider,
// which the bot's use command calls) moves a thread: its Docker container is destroyed, its next turn
// runs in a new Deno sandbox with the history replayed and without the old files, and a thread on
// Daytona is left alone.
func TestUseDenoBesideDockerAndDaytona(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		r := newMultiRig(t, st, clock)
		d := newDenoFixture(t)
		t.Cleanup(func() { destroyDeployment(t, d.prov, r.dep) })
		r.more = []sandbox.Provider{d.prov}
		// "sh: CMD" runs CMD in the thread's sandbox and answers provider:exit:output; anything else is
		// the rig's provider:alive probe.
		probe := r.rt.promptFunc
		r.rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
			cmd, ok := strings.CutPrefix(p.Text, "sh: ")
			if !ok {
				return probe(ctx, sb, sid, p, emit)
			}
			var out strings.Builder
			res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"sh", "-c", cmd}, Stdout: &out, Stderr: &out})
			if err != nil {
				return runtime.Result{}, err
			}
			return runtime.Result{Answer: fmt.Sprintf("%s:%d:%s", sb.Handle().Provider, res.ExitCode, strings.TrimSpace(out.String()))}, nil
		}
		ctx := t.Context()
		p := r.pool(t)
		require.Equal(t, []string{"docker", "daytona", deno.Name}, p.Providers())
		a, b := "test:A", "test:B"

		// Thread B runs on Daytona.
		_, err := p.UseProvider(ctx, WorkspaceThread{ThreadKey: b, Platform: "test", ChannelID: "c", UserID: "u"}, "daytona")
		require.NoError(t, err)
		require.Equal(t, "daytona:alive", turn(t, p, b, "b1", "hello from B").Answer)
		bBefore := sessionStatus(t, st, b)

		// Thread A runs on the default, Docker, and writes a file there.
		require.Equal(t, "docker:0:written", turn(t, p, a, "a1", "sh: echo kept > note.txt && echo written").Answer)
		before := sessionStatus(t, st, a)
		oldH := mustHandle(t, before)
		require.Equal(t, "docker", oldH.Provider)

		// "use deno" moves A: the Docker container goes now.
		ch, err := p.UseProvider(ctx, WorkspaceThread{ThreadKey: a, Platform: "test"}, deno.Name)
		require.NoError(t, err)
		require.Equal(t, ProviderChange{ThreadKey: a, From: "docker", To: deno.Name, Moved: true, OldSandbox: oldH.ID, Replay: true}, ch)
		_, err = r.dock.Inspect(ctx, oldH)
		require.ErrorIs(t, err, sandbox.ErrNotFound, "the Docker container is destroyed")
		left, err := r.dock.List(ctx, map[string]string{sandbox.LabelDeployment: r.dep, sandbox.LabelThread: a})
		require.NoError(t, err)
		require.Empty(t, left, "nothing of A is left on Docker")

		// A's next turn runs in a new Deno sandbox, with the history replayed but not the files.
		out := turn(t, p, a, "a2", "sh: cat note.txt 2>/dev/null || echo no file")
		require.Equal(t, "deno:0:no file", out.Answer)
		require.True(t, out.Recreated, "a new sandbox")
		require.True(t, out.Replayed, "the history is replayed (the bot's replay note)")
		require.Empty(t, out.Recreate, "the move itself destroyed the old sandbox; the use reply said so")
		after := sessionStatus(t, st, a)
		require.Equal(t, before.Generation+1, out.Generation)
		require.Equal(t, out.Generation, after.Generation)
		prompts := r.rt.recorded()
		hist := prompts[len(prompts)-1].History
		require.Contains(t, hist, "echo kept > note.txt", "A's first message is replayed on Deno")
		require.Contains(t, hist, "docker:0:written", "and its answer")
		require.Equal(t, deno.Name, after.Provider)
		require.Equal(t, db.SessionActive, after.Status)
		newH := mustHandle(t, after)
		require.Equal(t, deno.Name, newH.Provider)
		requireState(t, d.prov, newH, sandbox.StateRunning)
		d.counts(t, newH, 1, 0, "the Deno sandbox boots from its own volume")

		// Thread B is untouched: same Daytona sandbox, no recreate, no replay.
		out = turn(t, p, b, "b2", "again from B")
		require.Equal(t, "daytona:alive", out.Answer)
		require.False(t, out.Recreated)
		require.False(t, out.Replayed)
		bAfter := sessionStatus(t, st, b)
		require.Equal(t, "daytona", bAfter.Provider)
		require.Equal(t, bBefore.SandboxID, bAfter.SandboxID)
		require.Equal(t, bBefore.Generation, bAfter.Generation)
		requireState(t, r.day, mustHandle(t, bAfter), sandbox.StateRunning)
	})
}
