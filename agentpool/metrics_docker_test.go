package agentpool

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	agentrt "github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// removeBeforePrompt is the shell runtime, except that its first prompt finds the container removed
// (docker rm -f) between the resolve and the prompt's exec.
type removeBeforePrompt struct {
	agentrt.Runtime
	prov    sandbox.Provider
	removed atomic.Bool
}

func (r *removeBeforePrompt) Prompt(ctx context.Context, sb sandbox.Sandbox, sid string, p agentrt.Prompt, emit func(agentrt.Event)) (agentrt.Result, error) {
	if !r.removed.Swap(true) {
		if err := r.prov.Destroy(ctx, sb.Handle()); err != nil {
			return agentrt.Result{}, err
		}
	}
	return r.Runtime.Prompt(ctx, sb, sid, p, emit)
}

// TestDockerPromptOnARemovedSandboxIsRecoverable: a prompt that meets a removed container fails as
// sandbox-down (sandbox.prompt.recoverable_fail), the turn re-resolves (sandbox.resolve.recreate) and
// prompts once more (sandbox.prompt.ok), counting one prompt retry.
func TestDockerPromptOnARemovedSandboxIsRecoverable(t *testing.T) {
	dep := "metricstest-" + randomSuffix()
	prov := dockertest.New(t, docker.Options{Deployment: dep})
	t.Cleanup(func() { destroyDeployment(t, prov, dep) })
	rt := &removeBeforePrompt{Runtime: shellrt.New(), prov: prov}
	met := newRecordingMetrics()
	core, logs := observer.New(zapcore.InfoLevel)
	st := dbtest.OpenSQLite(t)
	p, err := New(Config{Deployment: dep, Image: dockertest.Image()},
		Deps{Store: st, Provider: prov, Runtime: rt, Logger: zap.New(core), Metrics: met})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

	sink := newCollector()
	tk := submit(t, p, "web:recover", "e1", "echo survived", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "survived", out.Answer)
	require.Equal(t, int64(2), out.Generation, "recreated once")

	for _, ev := range []string{EventPromptRecoverable, EventResolveRecreate, EventPromptOK} {
		got := logs.FilterMessage(ev).All()
		require.Len(t, got, 1, ev)
		f := got[0].ContextMap()
		require.Equal(t, "web:recover", f["thread"], ev)
		require.Equal(t, "docker", f["provider"], ev)
		require.Equal(t, tk.TurnID, f["turn"], ev)
	}
	require.Equal(t, "sandbox_down", logs.FilterMessage(EventPromptRecoverable).All()[0].ContextMap()["class"])
	require.Equal(t, 1, met.get("retry.docker.prompt"))
	require.Equal(t, 1, met.get("resolve.docker.recreate"))
}
