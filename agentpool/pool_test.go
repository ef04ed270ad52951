package agentpool

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

func TestTurnsRunInSubmissionOrderOnOneSandbox(t *testing.T) {
	prov := sandboxfake.New()
	release := make(chan struct{})
	rt := &scriptRuntime{}
	rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
		<-release // hold the first turn until every turn is queued, so Ahead is exact
		return runtime.Result{Answer: "echo: " + p.Text}, nil
	}
	f := newFixture(t, newSQLiteStore(t), prov, rt)
	sink := newCollector()
	for i := range 50 {
		tk := submit(t, f.pool, "web:order", fmt.Sprint("e", i), fmt.Sprint("msg ", i), sink)
		require.Equal(t, i, tk.Ahead, "the ticket says how many are ahead")
	}
	require.Equal(t, 50, f.pool.Depth("web:order"))
	close(release)
	outs := sink.wait(t, 50)
	for i, o := range outs {
		require.NoError(t, o.Err)
		require.Equal(t, fmt.Sprint("echo: msg ", i), o.Answer)
	}
	require.Equal(t, 1, prov.Calls("Create"), "one sandbox for the thread")
	require.Equal(t, 1, prov.Len())
}

func TestDuplicateEventIsRefused(t *testing.T) {
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), &scriptRuntime{})
	sink := newCollector()
	submit(t, f.pool, "web:dup", "e1", "hi", sink)
	_, err := f.pool.Submit(context.Background(), Request{ThreadKey: "web:dup", EventID: "e1", Text: "hi", Sink: sink})
	require.ErrorIs(t, err, db.ErrDuplicate)
	sink.wait(t, 1)
}

// TestResolverTransitions walks the failure matrix of DESIGN §6 with a fake provider: each row
// prepares what the previous turn left and what happened to the sandbox since, then runs one turn.
func TestResolverTransitions(t *testing.T) {
	tests := []struct {
		name string
		// between runs after a first successful turn, against the first sandbox's id.
		between        func(p *sandboxfake.Provider, id string)
		wantCreates    int
		wantStarts     int
		wantGeneration int64
		wantHistory    bool
		wantErr        bool
		wantStatus     db.SessionStatus
	}{
		{name: "running: reuse", between: func(*sandboxfake.Provider, string) {}, wantCreates: 1, wantGeneration: 1, wantStatus: db.SessionActive},
		{name: "stopped: resume", between: func(p *sandboxfake.Provider, id string) { p.StopOutOfBand(id) },
			wantCreates: 1, wantStarts: 1, wantGeneration: 1, wantStatus: db.SessionActive},
		{name: "missing: recreate with history", between: func(p *sandboxfake.Provider, id string) { p.RemoveOutOfBand(id) },
			wantCreates: 2, wantGeneration: 2, wantHistory: true, wantStatus: db.SessionActive},
		{name: "start fails: error and count", between: func(p *sandboxfake.Provider, id string) {
			p.StopOutOfBand(id)
			p.FailNext("Start", errors.New("engine busy"))
		}, wantCreates: 1, wantStarts: 1, wantGeneration: 1, wantErr: true, wantStatus: db.SessionError},
		{name: "start finds it gone: recreate", between: func(p *sandboxfake.Provider, id string) {
			p.StopOutOfBand(id)
			p.FailNext("Start", fmt.Errorf("x: %w", sandbox.ErrNotFound))
		}, wantCreates: 2, wantStarts: 1, wantGeneration: 2, wantHistory: true, wantStatus: db.SessionActive},
		{name: "inspect fails: report, keep sandbox", between: func(p *sandboxfake.Provider, id string) {
			p.FailNext("Inspect", errors.New("daemon hiccup"))
		}, wantCreates: 1, wantGeneration: 1, wantErr: true, wantStatus: db.SessionActive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov := sandboxfake.New()
			rt := &scriptRuntime{}
			f := newFixture(t, newSQLiteStore(t), prov, rt)
			sink := newCollector()
			submit(t, f.pool, "web:t", "e1", "first", sink)
			first := sink.wait(t, 1)[0]
			require.NoError(t, first.Err)
			require.True(t, first.Recreated, "the first turn creates")
			sess, err := f.store.SessionGet(context.Background(), "web:t")
			require.NoError(t, err)

			tt.between(prov, sess.SandboxID)
			submit(t, f.pool, "web:t", "e2", "second", sink)
			second := sink.wait(t, 1)[0]
			if tt.wantErr {
				require.Error(t, second.Err)
			} else {
				require.NoError(t, second.Err)
				require.Equal(t, "echo: second", second.Answer)
			}
			require.Equal(t, tt.wantCreates, prov.Calls("Create"), "creates")
			require.Equal(t, tt.wantStarts, prov.Calls("Start"), "starts")
			sess, err = f.store.SessionGet(context.Background(), "web:t")
			require.NoError(t, err)
			require.Equal(t, tt.wantGeneration, sess.Generation)
			require.Equal(t, tt.wantStatus, sess.Status)
			if tt.wantStatus == db.SessionError {
				require.Equal(t, 1, sess.ResumeFailCount)
				require.Contains(t, sess.LastError, "engine busy")
			}
			if !tt.wantErr {
				prompts := rt.recorded()
				last := prompts[len(prompts)-1]
				if tt.wantHistory {
					require.Contains(t, last.History, "User: first\nAssistant: echo: first", "history replayed into the new sandbox")
				} else {
					require.Empty(t, last.History)
				}
			}
		})
	}
}

func TestCreateRetriedOnlyWhenProviderDidNothing(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantCreates int
		wantOK      bool
	}{
		{"no effect: one retry", fmt.Errorf("dial: %w", sandbox.ErrNoEffect), 2, true},
		{"maybe created: no retry", errors.New("timeout after request sent"), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov := sandboxfake.New()
			prov.FailNext("Create", tt.err)
			f := newFixture(t, newSQLiteStore(t), prov, &scriptRuntime{})
			sink := newCollector()
			submit(t, f.pool, "web:c", "e1", "x", sink)
			out := sink.wait(t, 1)[0]
			require.Equal(t, tt.wantCreates, prov.Calls("Create"))
			require.Equal(t, tt.wantOK, out.Err == nil, "%v", out.Err)
			if !tt.wantOK {
				sess, err := f.store.SessionGet(context.Background(), "web:c")
				require.NoError(t, err)
				require.Equal(t, db.SessionError, sess.Status)
			}
		})
	}
}

func TestPromptFailureClassesRecoverOnce(t *testing.T) {
	tests := []struct {
		name        string
		errs        []error
		wantOK      bool
		wantPrompts int
		wantHistory bool
		wantCreates int
	}{
		{"session missing: new session, replay", []error{runtime.ErrSessionMissing}, true, 2, true, 1},
		{"sandbox down: re-resolve, retry", []error{fmt.Errorf("conn refused: %w", runtime.ErrSandboxDown)}, true, 2, false, 1},
		{"down twice: give up after one retry", []error{runtime.ErrSandboxDown, runtime.ErrSandboxDown}, false, 2, false, 1},
		{"fatal: no retry", []error{errors.New("model refused")}, false, 1, false, 1},
		{"cut after the agent got it: no retry", []error{runtime.PromptCut(runtime.ErrSandboxDown)}, false, 1, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov := sandboxfake.New()
			errs := tt.errs
			rt := &scriptRuntime{}
			rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
				if len(errs) > 0 {
					err := errs[0]
					errs = errs[1:]
					return runtime.Result{}, err
				}
				return runtime.Result{Answer: "ok " + sid}, nil
			}
			f := newFixture(t, newSQLiteStore(t), prov, rt)
			// A finished turn first, so there is history to replay.
			sink := newCollector()
			errsSaved := errs
			errs = nil
			submit(t, f.pool, "web:p", "e0", "earlier", sink)
			require.NoError(t, sink.wait(t, 1)[0].Err)
			errs = errsSaved
			before := len(rt.recorded())

			submit(t, f.pool, "web:p", "e1", "now", sink)
			out := sink.wait(t, 1)[0]
			require.Equal(t, tt.wantOK, out.Err == nil, "%v", out.Err)
			prompts := rt.recorded()[before:]
			require.Len(t, prompts, tt.wantPrompts)
			if tt.wantHistory {
				require.Contains(t, prompts[len(prompts)-1].History, "User: earlier")
				require.Equal(t, "ok s2", out.Answer, "a new agent session")
			}
			require.Equal(t, tt.wantCreates, prov.Calls("Create"))
		})
	}
}

func TestCancelStopsRunningTurnOnly(t *testing.T) {
	rt := &scriptRuntime{}
	started := make(chan struct{}, 2)
	rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
		if p.Text == "long" {
			started <- struct{}{}
			<-ctx.Done()
			return runtime.Result{}, ctx.Err()
		}
		return runtime.Result{Answer: "quick"}, nil
	}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
	sink := newCollector()
	long := submit(t, f.pool, "web:x", "e1", "long", sink)
	submit(t, f.pool, "web:x", "e2", "after", sink)
	<-started
	require.Equal(t, 2, f.pool.Depth("web:x"))
	require.True(t, f.pool.Cancel("web:x"))
	outs := sink.wait(t, 2)
	require.True(t, outs[0].Cancelled)
	require.Equal(t, "quick", outs[1].Answer, "the queued turn still runs")
	turn, err := f.store.TurnGet(context.Background(), long.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnCancelled, turn.Status)
	require.Equal(t, 1, rt.aborted, "the runtime was asked to abort")
}

func TestStuckTurnIsAbortedAndReported(t *testing.T) {
	rt := &scriptRuntime{}
	rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
		<-ctx.Done() // never says anything
		return runtime.Result{}, context.Cause(ctx)
	}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt, func(c *Config) { c.StuckAfter = 50 * time.Millisecond })
	sink := newCollector()
	tk := submit(t, f.pool, "web:s", "e1", "hang", sink)
	out := sink.wait(t, 1)[0]
	require.ErrorIs(t, out.Err, ErrStuck)
	require.False(t, out.Cancelled)
	turn, err := f.store.TurnGet(context.Background(), tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnFailed, turn.Status)
}

// TestRefusedTurnIsDoneWithItsFacts: a turn the runtime refused (the model gateway's budget) reaches
// the sink with the refusal's facts, for the bot to word, and is recorded as done, not failed: the
// refusal's message is its recorded answer.
func TestRefusedTurnIsDoneWithItsFacts(t *testing.T) {
	be := &runtime.BudgetError{Scope: runtime.ScopeThread, Limit: 15, Used: 15}
	rt := &scriptRuntime{promptFunc: func(context.Context, sandbox.Sandbox, string, runtime.Prompt, func(runtime.Event)) (runtime.Result, error) {
		return runtime.Result{Answer: be.Error(), IsError: true, Refusal: be}, nil
	}}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
	sink := newCollector()
	tk := submit(t, f.pool, "web:b", "e1", "hi", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.True(t, out.IsError)
	require.Same(t, be, out.Refusal)
	require.Equal(t, EBUDGET, ErrorCode(out.Refusal))
	turn, err := f.store.TurnGet(context.Background(), tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnDone, turn.Status)
	require.Equal(t, be.Error(), turn.Answer)
}

func TestShutdownDrainsAndRefusesNewTurns(t *testing.T) {
	prov := sandboxfake.New()
	f := newFixture(t, newSQLiteStore(t), prov, &scriptRuntime{})
	sink := newCollector()
	for i := range 5 {
		submit(t, f.pool, "web:d", fmt.Sprint("e", i), "x", sink)
	}
	require.NoError(t, f.pool.Shutdown(context.Background()))
	require.Len(t, sink.wait(t, 5), 5, "queued turns drained")
	_, err := f.pool.Submit(context.Background(), Request{ThreadKey: "web:d", EventID: "late", Text: "x", Sink: sink})
	require.ErrorIs(t, err, ErrClosed)
	require.Equal(t, 0, prov.Calls("Destroy"), "shutdown never destroys sandboxes")
	require.Equal(t, 1, prov.Len())
}

func TestResetStartsFreshWithoutHistory(t *testing.T) {
	prov := sandboxfake.New()
	rt := &scriptRuntime{}
	f := newFixture(t, newSQLiteStore(t), prov, rt)
	sink := newCollector()
	submit(t, f.pool, "web:r", "e1", "before reset", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)
	first, err := f.store.SessionGet(context.Background(), "web:r")
	require.NoError(t, err)

	require.NoError(t, f.pool.Reset(context.Background(), "web:r"))
	require.Nil(t, prov.Box(first.SandboxID), "the old sandbox is destroyed")

	submit(t, f.pool, "web:r", "e2", "after reset", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, int64(2), out.Generation, "a fresh sandbox")
	prompts := rt.recorded()
	require.Empty(t, prompts[len(prompts)-1].History, "nothing from before the reset is replayed")

	// A later recreate replays only what came after the reset.
	sess, err := f.store.SessionGet(context.Background(), "web:r")
	require.NoError(t, err)
	prov.RemoveOutOfBand(sess.SandboxID)
	submit(t, f.pool, "web:r", "e3", "third", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)
	h := rt.recorded()[len(rt.recorded())-1].History
	require.Contains(t, h, "after reset")
	require.NotContains(t, h, "before reset")
}

func TestCancelTurnTargetsOnlyThatTurn(t *testing.T) {
	rt := &scriptRuntime{}
	started := make(chan struct{}, 1)
	rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return runtime.Result{}, ctx.Err()
	}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
	sink := newCollector()
	tk := submit(t, f.pool, "web:ct", "e1", "x", sink)
	<-started
	require.False(t, f.pool.CancelTurn("web:ct", tk.TurnID+100, ErrStuck), "a stale turn id cancels nothing")
	require.True(t, f.pool.CancelTurn("web:ct", tk.TurnID, ErrStuck))
	out := sink.wait(t, 1)[0]
	require.ErrorIs(t, out.Err, ErrStuck, "reported as stuck, not as stopped by the user")
	require.False(t, out.Cancelled)
}

func TestCancelDuringEnsureIsNotASessionFailure(t *testing.T) {
	rt := &scriptRuntime{}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
	sink := newCollector()
	submit(t, f.pool, "web:ce", "e0", "first", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)
	inEnsure := make(chan struct{})
	rt.mu.Lock()
	rt.ensureFunc = func(ctx context.Context) error { close(inEnsure); <-ctx.Done(); return ctx.Err() }
	rt.mu.Unlock()
	submit(t, f.pool, "web:ce", "e1", "second", sink)
	<-inEnsure
	require.True(t, f.pool.Cancel("web:ce"))
	out := sink.wait(t, 1)[0]
	require.True(t, out.Cancelled)
	sess, err := f.store.SessionGet(context.Background(), "web:ce")
	require.NoError(t, err)
	require.Equal(t, db.SessionActive, sess.Status, "a runtime that failed by cancellation leaves the session as it was")
	require.Zero(t, sess.ResumeFailCount)
}

func TestRuntimeFailureStopsTheSandbox(t *testing.T) {
	rt := &scriptRuntime{ensureErrs: []error{errors.New("health: 500"), errors.New("health: 500")}}
	prov := sandboxfake.New()
	f := newFixture(t, newSQLiteStore(t), prov, rt)
	sink := newCollector()
	submit(t, f.pool, "web:rf", "e1", "x", sink)
	require.ErrorContains(t, sink.wait(t, 1)[0].Err, "health: 500")
	sess, err := f.store.SessionGet(context.Background(), "web:rf")
	require.NoError(t, err)
	require.Equal(t, db.SessionError, sess.Status)
	require.Equal(t, 1, sess.ResumeFailCount)
	require.Equal(t, sandbox.StateStopped, prov.Box(sess.SandboxID).State, "nothing keeps running while the session is in error")
	// The next message resumes it and tries the runtime again.
	submit(t, f.pool, "web:rf", "e2", "y", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "echo: y", out.Answer)
}

func TestTurnTimeoutAbortsTheRuntime(t *testing.T) {
	rt := &scriptRuntime{}
	rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
		<-ctx.Done()
		return runtime.Result{}, ctx.Err()
	}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt, func(c *Config) { c.TurnTimeout = 50 * time.Millisecond })
	sink := newCollector()
	submit(t, f.pool, "web:to", "e1", "x", sink)
	out := sink.wait(t, 1)[0]
	require.ErrorIs(t, out.Err, context.DeadlineExceeded)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	require.Equal(t, 1, rt.aborted, "the runtime is told to stop a timed-out turn")
}

func TestResetDropsQueuedTurns(t *testing.T) {
	rt := &scriptRuntime{}
	started := make(chan struct{}, 1)
	rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
		if p.Text == "long" {
			started <- struct{}{}
			<-ctx.Done()
			return runtime.Result{}, ctx.Err()
		}
		return runtime.Result{Answer: "ran " + p.Text}, nil
	}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
	sink := newCollector()
	submit(t, f.pool, "web:rs", "e1", "long", sink)
	queued := submit(t, f.pool, "web:rs", "e2", "queued", sink)
	<-started
	require.NoError(t, f.pool.Reset(context.Background(), "web:rs"))
	outs := sink.wait(t, 2)
	for _, o := range outs {
		require.True(t, o.Cancelled)
		require.ErrorIs(t, o.Err, ErrReset)
	}
	turn, err := f.store.TurnGet(context.Background(), queued.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnCancelled, turn.Status, "the queued turn never ran")
}

// startLostStore commits a turn's start, then reports the failure a connection lost after the
// commit would.
type startLostStore struct {
	db.Store
}

func (s startLostStore) TurnStartFirst(ctx context.Context, id int64, owner string) (db.Turn, error) {
	if _, err := s.Store.TurnStartFirst(ctx, id, owner); err != nil {
		return db.Turn{}, err
	}
	return db.Turn{}, errors.New("db: start turn: unexpected EOF")
}

// TestStartOfUnknownOutcomeIsAnswered: a start whose commit may have happened (the connection failed
// after it) is answered with the failure and recorded as failed, never taken for another process's
// claim and dropped in silence, nor run.
func TestStartOfUnknownOutcomeIsAnswered(t *testing.T) {
	st := newSQLiteStore(t)
	rt := &scriptRuntime{}
	ran := make(chan struct{}, 1)
	rt.promptFunc = func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
		ran <- struct{}{}
		return runtime.Result{Answer: "ran"}, nil
	}
	f := newFixture(t, startLostStore{st}, sandboxfake.New(), rt)
	sink := newCollector()
	tk := submit(t, f.pool, "web:lost", "e1", "hi", sink)
	out := sink.wait(t, 1)[0]
	require.Error(t, out.Err)
	require.Contains(t, out.Err.Error(), "start turn")
	require.Empty(t, ran, "the prompt did not run")
	turn, err := st.TurnGet(context.Background(), tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnFailed, turn.Status)
}

// transitionCounter counts the session writes a store is asked for.
type transitionCounter struct {
	db.Store
	n atomic.Int32
}

func (s *transitionCounter) SessionTransition(ctx context.Context, key string, t db.Transition) (db.Session, error) {
	s.n.Add(1)
	return s.Store.SessionTransition(ctx, key, t)
}

// TestNewThreadWritesSessionThrice: a new thread's first turn writes its session three times (begin
// create, the sandbox's handle, then the runtime's health with its agent session together), and a warm
// turn after it none.
func TestNewThreadWritesSessionThrice(t *testing.T) {
	st := &transitionCounter{Store: newSQLiteStore(t)}
	f := newFixture(t, st, sandboxfake.New(), &scriptRuntime{})
	sink := newCollector()
	submit(t, f.pool, "web:w3", "e1", "hi", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)
	require.Equal(t, int32(3), st.n.Load())
	sess, err := st.SessionGet(context.Background(), "web:w3")
	require.NoError(t, err)
	require.NotEmpty(t, sess.AgentSessionID)
	require.False(t, sess.LastHealthOKAt.IsZero())

	submit(t, f.pool, "web:w3", "e2", "again", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)
	require.Equal(t, int32(3), st.n.Load(), "a warm turn writes no session transition")
}
