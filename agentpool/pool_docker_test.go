package agentpool

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	agentrt "github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
)

// recordingRuntime is the real shell runtime, remembering every prompt it was handed.
type recordingRuntime struct {
	agentrt.Runtime
	mu      sync.Mutex
	prompts []agentrt.Prompt
}

func (r *recordingRuntime) Prompt(ctx context.Context, sb sandbox.Sandbox, sid string, p agentrt.Prompt, emit func(agentrt.Event)) (agentrt.Result, error) {
	r.mu.Lock()
	r.prompts = append(r.prompts, p)
	r.mu.Unlock()
	return r.Runtime.Prompt(ctx, sb, sid, p, emit)
}

func (r *recordingRuntime) last() agentrt.Prompt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prompts[len(r.prompts)-1]
}

// dockerFixture is a provFixture on Docker, for the tests that reach into Docker itself (volumes).
type dockerFixture struct {
	provFixture
	docker *docker.Provider
}

func newDockerFixture(t *testing.T, st db.Store) dockerFixture {
	t.Helper()
	f := newProvFixture(t, st, dockerEnv(t))
	return dockerFixture{provFixture: f, docker: f.prov.(*docker.Provider)}
}

func destroyDeployment(t *testing.T, p sandbox.Provider, dep string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := p.List(ctx, map[string]string{sandbox.LabelDeployment: dep})
	if err != nil {
		t.Logf("cleanup list: %v", err)
		return
	}
	for _, info := range list {
		_ = p.Destroy(ctx, info.Handle)
	}
	// Volumes whose container was removed behind the provider's back (tests do docker rm -f).
	if vr, ok := p.(sandbox.VolumeReaper); ok {
		vols, err := vr.ListVolumes(ctx, map[string]string{sandbox.LabelDeployment: dep})
		if err != nil {
			t.Logf("cleanup list volumes: %v", err)
			return
		}
		for _, v := range vols {
			_ = vr.RemoveVolume(ctx, v.Name)
		}
	}
}

func TestDocker50TurnsInOrderOnOneSandbox(t *testing.T) {
	forEachProvider(t, test50Turns)
}

func test50Turns(t *testing.T, env provEnv) {
	f := newProvFixture(t, dbtest.OpenPostgres(t), env)
	sink := newCollector()
	for i := range 50 {
		submit(t, f.pool, "web:fifty", fmt.Sprint("e", i), fmt.Sprintf("echo %d >> order.log; echo answer %d", i, i), sink)
	}
	outs := sink.wait(t, 50)
	for i, o := range outs {
		require.NoError(t, o.Err)
		require.Equal(t, fmt.Sprintf("answer %d", i), o.Answer, "answers arrive in submission order")
	}
	require.Len(t, f.sandboxes(t), 1, "one sandbox for the thread")
	sess, err := f.store.SessionGet(t.Context(), "web:fifty")
	require.NoError(t, err)
	data, err := f.prov.ReadFile(t.Context(), mustHandle(t, sess), "order.log", 1<<20)
	require.NoError(t, err)
	var want strings.Builder
	for i := range 50 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	require.Equal(t, want.String(), string(data), "turns ran in order, one at a time")
}

// TestDockerTwoReplicasOneSandbox runs two pools, as two replicas would, on one PostgreSQL: the
// advisory lock must give one sandbox and turns that never overlap.
func TestDockerTwoReplicasOneSandbox(t *testing.T) {
	url := dbtest.PostgresSchemaURL(t)
	st1, st2 := dbtest.OpenURL(t, url), dbtest.OpenURL(t, url)
	f := newDockerFixture(t, st1)
	pool2, err := New(f.pool.cfg, Deps{Store: st2, Provider: f.docker, Runtime: shellrt.New(), Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool2.Shutdown(context.Background()) })

	sink := newCollector()
	var wg sync.WaitGroup
	for r, p := range []*Pool{f.pool, pool2} {
		wg.Go(func() {
			for i := range 20 {
				// Each turn brackets its work in the shared log; an overlap would interleave the lines.
				cmd := fmt.Sprintf("echo begin %d-%d >> turns.log; echo work >> turns.log; echo end %d-%d >> turns.log; echo ok", r, i, r, i)
				submit(t, p, "web:replicas", fmt.Sprintf("r%d-e%d", r, i), cmd, sink)
			}
		})
	}
	wg.Wait()
	outs := sink.wait(t, 40)
	for _, o := range outs {
		require.NoError(t, o.Err)
		require.Equal(t, "ok", o.Answer)
	}
	require.Len(t, f.sandboxes(t), 1, "two replicas, one sandbox")
	sess, err := st1.SessionGet(t.Context(), "web:replicas")
	require.NoError(t, err)
	require.Equal(t, int64(1), sess.Generation)
	data, err := f.docker.ReadFile(t.Context(), mustHandle(t, sess), "turns.log", 1<<20)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 120)
	for i := 0; i < len(lines); i += 3 {
		id := strings.TrimPrefix(lines[i], "begin ")
		require.Equal(t, []string{"begin " + id, "work", "end " + id}, lines[i:i+3], "no interleaving at line %d", i)
	}
}

// TestDockerHealsRemovedAndStoppedSandboxes: a sandbox stopped behind the pool's back is resumed
// with its files; one removed behind its back is recreated with the history replayed.
func TestDockerHealsRemovedAndStoppedSandboxes(t *testing.T) {
	forEachProvider(t, testHeals)
}

func testHeals(t *testing.T, env provEnv) {
	f := newProvFixture(t, dbtest.OpenPostgres(t), env)
	sink := newCollector()
	submit(t, f.pool, "web:heal", "e1", "echo kept > notes.txt && echo first", sink)
	require.Equal(t, "first", sink.wait(t, 1)[0].Answer)
	sess, err := f.store.SessionGet(t.Context(), "web:heal")
	require.NoError(t, err)
	h := mustHandle(t, sess)

	// Stopped between turns: the next turn resumes the same sandbox, files intact.
	env.stopOutOfBand(t, h)
	submit(t, f.pool, "web:heal", "e2", "cat notes.txt", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "kept", out.Answer, "the workspace survived the stop")
	require.False(t, out.Recreated)
	after, err := f.store.SessionGet(t.Context(), "web:heal")
	require.NoError(t, err)
	require.Equal(t, sess.SandboxID, after.SandboxID, "same sandbox")
	require.Equal(t, int64(1), after.Generation)
	require.False(t, after.ResumedAt.IsZero())

	// Removed between turns: recreated, generation + 1, and the history replayed.
	env.removeOutOfBand(t, h)
	submit(t, f.pool, "web:heal", "e3", "echo third", sink)
	out = sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "third", out.Answer)
	require.True(t, out.Recreated)
	require.Equal(t, int64(2), out.Generation)
	replayed := f.rt.last().History
	require.Contains(t, replayed, "User: echo kept > notes.txt && echo first\nAssistant: first")
	require.Contains(t, replayed, "User: cat notes.txt\nAssistant: kept")
	require.Len(t, f.sandboxes(t), 1)
}

// cancelDuringCreate creates the container, then cancels the turn before the handle reaches the
// pool: the worst case for leaks, when a provider did the work but the caller never heard of it.
type cancelDuringCreate struct {
	sandbox.Provider
	cancel func()
}

func (c cancelDuringCreate) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	_, err := c.Provider.Create(context.WithoutCancel(ctx), spec)
	if err != nil {
		return sandbox.Handle{}, err
	}
	c.cancel()
	<-ctx.Done()
	return sandbox.Handle{}, fmt.Errorf("create: %w", ctx.Err())
}

func TestDockerCancelledCreateLeavesNoOrphanAfterReap(t *testing.T) {
	forEachProvider(t, testCancelledCreate)
}

func testCancelledCreate(t *testing.T, env provEnv) {
	st := dbtest.OpenPostgres(t)
	dep := "pooltest-" + randomSuffix()
	prov := env.open(t, dep)
	t.Cleanup(func() { destroyDeployment(t, prov, dep) })
	var pool *Pool
	wrapped := cancelDuringCreate{Provider: prov, cancel: func() { pool.Cancel("web:cancel") }}
	f := newFixture(t, st, wrapped, shellrt.New(), func(c *Config) { c.Deployment = dep; c.Image = env.image })
	pool = f.pool
	sink := newCollector()
	submit(t, pool, "web:cancel", "e1", "echo never", sink)
	out := sink.wait(t, 1)[0]
	require.True(t, out.Cancelled, "%v", out.Err)
	list, err := prov.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
	require.NoError(t, err)
	require.Len(t, list, 1, "the create went through: an orphan exists")

	later := time.Now().Add(11 * time.Minute)
	m, err := NewMaintainer(MaintainerConfig{}, MaintainerDeps{Store: st, Provider: prov, Deployment: dep,
		Now: func() time.Time { return later }})
	require.NoError(t, err)
	rep, err := m.ReapPass(t.Context(), false)
	require.NoError(t, err)
	require.Len(t, rep.Orphans, 1)
	list, err = prov.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
	require.NoError(t, err)
	require.Empty(t, list, "the reaper removed the orphan")
}

func TestDockerShutdownKeepsSandboxesAndNewPoolPicksThemUp(t *testing.T) {
	forEachProvider(t, testShutdownPickUp)
}

func testShutdownPickUp(t *testing.T, env provEnv) {
	st := dbtest.OpenPostgres(t)
	f := newProvFixture(t, st, env)
	sink := newCollector()
	submit(t, f.pool, "web:restart", "e1", "echo state > s.txt && echo one", sink)
	require.Equal(t, "one", sink.wait(t, 1)[0].Answer)
	require.NoError(t, f.pool.Shutdown(t.Context()))
	requireNoPoolGoroutines(t)

	sess, err := st.SessionGet(t.Context(), "web:restart")
	require.NoError(t, err)
	info, err := f.prov.Inspect(t.Context(), mustHandle(t, sess))
	require.NoError(t, err)
	require.Equal(t, sandbox.StateRunning, info.State, "shutdown leaves the sandbox running")

	pool2, err := New(f.pool.cfg, Deps{Store: st, Provider: f.prov, Runtime: shellrt.New(), Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	submit(t, pool2, "web:restart", "e2", "cat s.txt", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "state", out.Answer)
	require.False(t, out.Recreated, "the new pool reuses the running sandbox")
	require.Len(t, f.sandboxes(t), 1)
	require.NoError(t, pool2.Shutdown(t.Context()))
	requireNoPoolGoroutines(t)
}

func mustHandle(t *testing.T, s db.Session) sandbox.Handle {
	t.Helper()
	h, err := sandbox.DecodeHandle(s.Handle, s.Provider)
	require.NoError(t, err)
	require.False(t, h.IsZero())
	return h
}

// requireNoPoolGoroutines fails if any goroutine is still running pool code (a queue drain, a turn, a
// watchdog). Exiting goroutines get a bounded moment to finish returning.
func requireNoPoolGoroutines(t *testing.T) {
	t.Helper()
	var stacks string
	for wait := time.Millisecond; wait < 5*time.Second; wait *= 2 {
		stacks = poolStacks()
		if stacks == "" {
			return
		}
		<-time.After(wait)
	}
	t.Fatalf("pool goroutines leaked:\n%s", stacks)
}

func poolStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "agentpool.(*queues).drain") || strings.Contains(g, "agentpool.newWatch") ||
			strings.Contains(g, "agentpool.(*Pool).runTurn") {
			leaked = append(leaked, g)
		}
	}
	return strings.Join(leaked, "\n\n")
}
