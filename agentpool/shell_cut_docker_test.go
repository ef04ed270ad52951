package agentpool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	agentrt "github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
)

// execCounter is a provider that counts the execs carrying a given command, and refuses all but the
// first (a second would wait at the test's fifo for ever).
type execCounter struct {
	sandbox.Provider
	cmd string
	n   atomic.Int32
}

func (c *execCounter) Exec(ctx context.Context, h sandbox.Handle, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Cmd) > 0 && req.Cmd[len(req.Cmd)-1] == c.cmd && c.n.Add(1) > 1 {
		return sandbox.ExecResult{}, errors.New("the test's command was run a second time")
	}
	return c.Provider.Exec(ctx, h, req)
}

// TestDockerShellCommandCutMidRunIsNotRunAgain: a shell command whose container is stopped (docker
// stop) or removed (docker rm -f) while it runs ran, and may have done its work: the pool must not run
// it a second time in the resumed or recreated sandbox (it did: the exec failed as sandbox-down, so
// the pool re-resolved and ran `echo run >> runs.log` again). The turn ends interrupted, found by
// retry, with the command handed to the sandbox once; after a stop, the resumed sandbox's log says it
// ran once; and the thread's next turn runs as usual.
func TestDockerShellCommandCutMidRunIsNotRunAgain(t *testing.T) {
	forEachProvider(t, testShellCommandCut)
}

func testShellCommandCut(t *testing.T, env provEnv) {
	const cmd = `echo run >> runs.log; rm -f gate; mkfifo gate; echo started; cat gate`
	tests := []struct {
		name    string
		cut     func(t *testing.T, h sandbox.Handle)
		wantLog string // what the thread's next turn finds in runs.log
	}{
		{"stopped", env.stopOutOfBand, "run"},
		{"removed", env.removeOutOfBand, "(no log)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dep := "shellcut-" + randomSuffix()
			prov := env.open(t, dep)
			t.Cleanup(func() { destroyDeployment(t, prov, dep) })
			counter := &execCounter{Provider: prov, cmd: cmd}
			rt := &recordingRuntime{Runtime: shellrt.New()}
			f := newFixture(t, dbtest.OpenSQLite(t), counter, rt, func(c *Config) { c.Deployment = dep; c.Image = env.image })
			pool := f.pool
			const th = "web:cut"

			started := make(chan struct{})
			var once sync.Once
			sink := newCollector()
			tk := submit(t, pool, th, "e1", cmd, SinkFuncs{
				ProgressFunc: func(ev agentrt.Event) {
					if strings.Contains(ev.Text, "started") {
						once.Do(func() { close(started) })
					}
				},
				DeliverFunc: sink.Deliver,
			})
			select {
			case <-started: // the command waits at the fifo: cut it now
			case out := <-sink.got:
				t.Fatalf("the turn ended before the cut: %+v", out)
			}
			tt.cut(t, mustHandle(t, sessionStatus(t, f.store, th)))

			out := sink.wait(t, 1)[0]
			require.Equal(t, EINTERRUPTED, ErrorCode(out.Err), "%v", out.Err)
			require.ErrorIs(t, out.Err, agentrt.ErrPromptCut)
			require.Equal(t, int32(1), counter.n.Load(), "the command was handed to the sandbox once")
			rt.mu.Lock()
			require.Len(t, rt.prompts, 1, "and prompted once")
			rt.mu.Unlock()
			got, err := f.store.TurnLastFailedWith(t.Context(), th, InterruptedText)
			require.NoError(t, err, "retry finds it")
			require.Equal(t, tk.TurnID, got.ID)
			require.Equal(t, db.TurnFailed, got.Status)

			next := newCollector()
			submit(t, pool, th, "e2", "cat runs.log 2>/dev/null || echo '(no log)'", next)
			out = next.wait(t, 1)[0]
			require.NoError(t, out.Err)
			require.Equal(t, tt.wantLog, out.Answer, "the cut command ran once")
			require.Equal(t, int32(1), counter.n.Load())
		})
	}
}
