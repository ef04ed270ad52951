package agentpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// recordingMetrics is a Metrics that counts every call by a readable key.
type recordingMetrics struct {
	mu     sync.Mutex
	counts map[string]int
	queued int
	// finished gets every TurnFinished outcome: it is recorded after the delivery.
	finished chan string
}

var _ Metrics = (*recordingMetrics)(nil)

func newRecordingMetrics() *recordingMetrics {
	return &recordingMetrics{counts: map[string]int{}, finished: make(chan string, 100)}
}

func (m *recordingMetrics) add(key string) { m.mu.Lock(); m.counts[key]++; m.mu.Unlock() }

func (m *recordingMetrics) get(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[key]
}

func (m *recordingMetrics) TurnQueued(d int) { m.mu.Lock(); m.queued += d; m.mu.Unlock() }
func (m *recordingMetrics) TurnStarted(time.Duration) {
	m.add("turn.started")
}
func (m *recordingMetrics) TurnFinished(outcome string, _ time.Duration) {
	m.add("turn." + outcome)
	m.finished <- outcome
}
func (m *recordingMetrics) Resolve(provider, outcome string, _ time.Duration) {
	m.add("resolve." + provider + "." + outcome)
}
func (m *recordingMetrics) Retry(provider, kind string) { m.add("retry." + provider + "." + kind) }
func (m *recordingMetrics) Pass(name string, _ PassReport, _ time.Duration, err error) {
	m.add("pass." + name)
}
func (m *recordingMetrics) Leading(leader bool)                 { m.add(fmt.Sprint("leading.", leader)) }
func (m *recordingMetrics) Sandboxes(provider string, _, _ int) { m.add("sandboxes." + provider) }
func (m *recordingMetrics) ProviderDown(provider, pass string) {
	m.add("provider_down." + provider + "." + pass)
}

// TestSeedLogEventsAndMetrics drives each of seed 004's situations through a pool on the fake provider
// and checks the named log events (with thread, generation, provider and turn id) and the counters.
func TestSeedLogEventsAndMetrics(t *testing.T) {
	const thread = "test:events"
	for _, tc := range []struct {
		name string
		// setup scripts the runtime and provider before the second turn (the first always creates).
		setup      func(rt *scriptRuntime, prov *sandboxfake.Provider, sandboxID string)
		wantEvents []string
		wantCounts []string
		wantErr    bool
	}{
		{
			name:       "reuse",
			setup:      func(*scriptRuntime, *sandboxfake.Provider, string) {},
			wantEvents: []string{EventResolveStart, EventResolveReuse, EventPromptOK},
			wantCounts: []string{"resolve.fake.reuse", "turn.done"},
		},
		{
			name: "resume",
			setup: func(_ *scriptRuntime, prov *sandboxfake.Provider, id string) {
				prov.StopOutOfBand(id)
			},
			wantEvents: []string{EventResolveStart, EventResolveReuse, EventPromptOK},
			wantCounts: []string{"resolve.fake.resume"},
		},
		{
			name: "recreate after the sandbox is removed behind our back",
			setup: func(_ *scriptRuntime, prov *sandboxfake.Provider, id string) {
				prov.RemoveOutOfBand(id)
			},
			wantEvents: []string{EventResolveStart, EventResolveRecreate, EventPromptOK},
			wantCounts: []string{"resolve.fake.recreate"},
		},
		{
			name: "health retry and runtime restart",
			setup: func(rt *scriptRuntime, _ *sandboxfake.Provider, _ string) {
				rt.mu.Lock()
				rt.ensureErrs = []error{errors.New("health check: connection refused")}
				rt.mu.Unlock()
			},
			wantEvents: []string{EventHealthRetry, EventPromptOK},
			wantCounts: []string{"retry.fake.health", "retry.fake.runtime_restart"},
		},
		{
			name: "agent session replaced",
			setup: func(rt *scriptRuntime, _ *sandboxfake.Provider, _ string) {
				rt.mu.Lock()
				rt.sessionGone = true
				rt.mu.Unlock()
			},
			wantEvents: []string{EventSessionReplaced, EventPromptOK},
			wantCounts: []string{"resolve.fake.session_replaced"},
		},
		{
			name: "recoverable prompt failure, retried once",
			setup: func(rt *scriptRuntime, _ *sandboxfake.Provider, _ string) {
				var once sync.Once
				rt.mu.Lock()
				rt.promptFunc = func(_ context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
					err := fmt.Errorf("prompt: %w", runtime.ErrSessionMissing)
					once.Do(func() { p.Text = "" })
					if p.Text == "" {
						return runtime.Result{}, err
					}
					return runtime.Result{Answer: "ok"}, nil
				}
				rt.mu.Unlock()
			},
			wantEvents: []string{EventPromptRecoverable, EventSessionReplaced, EventPromptOK},
			wantCounts: []string{"retry.fake.prompt", "turn.done"},
		},
		{
			name: "fatal prompt failure",
			setup: func(rt *scriptRuntime, _ *sandboxfake.Provider, _ string) {
				rt.mu.Lock()
				rt.promptFunc = func(context.Context, sandbox.Sandbox, string, runtime.Prompt, func(runtime.Event)) (runtime.Result, error) {
					return runtime.Result{}, errors.New("the model refused")
				}
				rt.mu.Unlock()
			},
			wantEvents: []string{EventPromptFatal},
			wantCounts: []string{"turn.failed"},
			wantErr:    true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newSQLiteStore(t)
			prov := sandboxfake.New()
			rt := &scriptRuntime{}
			met := newRecordingMetrics()
			core, logs := observer.New(zapcore.InfoLevel)
			p, err := New(Config{Deployment: "test-events", Image: "img"},
				Deps{Store: st, Provider: prov, Runtime: rt, Logger: zap.New(core), Metrics: met})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

			sink := newCollector()
			first := submit(t, p, thread, "e1", "first", sink)
			require.NoError(t, sink.wait(t, 1)[0].Err)
			require.Equal(t, TurnOutcomeDone, <-met.finished)
			require.Equal(t, 1, met.get("resolve.fake.create"), "the first turn creates")
			created := logs.FilterMessage(EventResolveCreate).All()
			require.Len(t, created, 1)
			requireTurnFields(t, created[0], thread, 1, first.TurnID)

			sess, err := st.SessionGet(t.Context(), thread)
			require.NoError(t, err)
			before := sess.Generation
			tc.setup(rt, prov, sess.SandboxID)
			logs.TakeAll()
			second := submit(t, p, thread, "e2", "second", sink)
			out := sink.wait(t, 1)[0]
			<-met.finished
			if tc.wantErr {
				require.Error(t, out.Err)
			} else {
				require.NoError(t, out.Err)
			}
			sess, err = st.SessionGet(t.Context(), thread)
			require.NoError(t, err)
			for _, ev := range tc.wantEvents {
				got := logs.FilterMessage(ev).All()
				require.NotEmpty(t, got, "log event %s; the log has %v", ev, messages(logs))
				gen := sess.Generation
				if ev == EventResolveStart {
					gen = before // logged before the resolve, which may move it
				}
				requireTurnFields(t, got[len(got)-1], thread, gen, second.TurnID)
			}
			for _, k := range tc.wantCounts {
				require.Positive(t, met.get(k), "metric %s; got %v", k, met.counts)
			}
			require.Equal(t, 2, met.get("turn.started"))
			met.mu.Lock()
			require.Zero(t, met.queued, "the queued gauge is back to zero")
			met.mu.Unlock()
		})
	}
}

func requireTurnFields(t *testing.T, e observer.LoggedEntry, thread string, generation, turn int64) {
	t.Helper()
	f := e.ContextMap()
	require.Equal(t, thread, f["thread"], "%s: thread", e.Message)
	require.Equal(t, generation, f["generation"], "%s: generation", e.Message)
	require.Equal(t, "fake", f["provider"], "%s: provider", e.Message)
	require.Equal(t, turn, f["turn"], "%s: turn id", e.Message)
}

func messages(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		out = append(out, e.Message)
	}
	return out
}

// TestMaintainerReportsLeadershipAndPasses: the leader says it leads, records every pass with what it
// did, reports the reaper's view of the provider, and says it stopped leading when Run ends.
func TestMaintainerReportsLeadershipAndPasses(t *testing.T) {
	prov := sandboxfake.New()
	_ = fakeBox(t, prov, "dep", "web:orphan") // no session owns it
	met := newRecordingMetrics()
	m, err := NewMaintainer(MaintainerConfig{Interval: 5 * time.Millisecond},
		MaintainerDeps{Store: newSQLiteStore(t), Provider: prov, Deployment: "dep", Metrics: met})
	require.NoError(t, err)
	passes := make(chan string)
	stop := runMaintainer(t, m, "", passes)
	for _, want := range passRound {
		require.Equal(t, want, nextPass(t, passes))
	}
	stop()
	for _, k := range []string{"leading.true", "leading.false", "sandboxes.fake"} {
		require.Positive(t, met.get(k), "%s; got %v", k, met.counts)
	}
	for _, p := range passRound {
		require.Positive(t, met.get("pass."+p), "pass %s recorded", p)
	}
}
