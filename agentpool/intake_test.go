package agentpool

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestStartAtIntake: on PostgreSQL, a message to a thread idle here is recorded started, in its
// intake's commit (started_at is created_at), and runs; one sent while it runs is recorded queued
// and starts after it. Both are answered in order, each prompt run once.
func TestStartAtIntake(t *testing.T) {
	st := dbtest.OpenPostgres(t)
	entered, gate := make(chan string, 2), make(chan struct{})
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		entered <- p.Text
		select {
		case <-gate:
		case <-ctx.Done():
			return runtime.Result{}, ctx.Err()
		}
		return runtime.Result{Answer: "echo: " + p.Text}, nil
	}}
	f := newFixture(t, st, sandboxfake.New(), rt, func(c *Config) { c.MaxActive = 20 })
	opened := false
	t.Cleanup(func() { // before the pool's shutdown, which waits for the turns
		if !opened {
			close(gate)
		}
	})
	sink := newCollector()

	first := submit(t, f.pool, "k", "e1", "one", sink)
	require.Equal(t, "one", <-entered)
	tr, err := st.TurnGet(t.Context(), first.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnRunning, tr.Status)
	require.Equal(t, tr.CreatedAt, tr.StartedAt, "started in the commit that recorded it")

	second := submit(t, f.pool, "k", "e2", "two", sink)
	require.Equal(t, 1, second.Ahead)
	tr2, err := st.TurnGet(t.Context(), second.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnQueued, tr2.Status, "a busy thread's message waits its turn")

	close(gate)
	opened = true
	outs := sink.wait(t, 2)
	require.Equal(t, "echo: one", outs[0].Answer)
	require.Equal(t, "echo: two", outs[1].Answer)
	require.Equal(t, "two", <-entered)
	require.Len(t, rt.recorded(), 2)
}

// commitThenFail is a store whose held intake commits the turn, started, and then reports a failure,
// as a connection that dies after the commit does; the lock goes with the connection.
type commitThenFail struct {
	db.Store
	held  heldIntake
	calls int
}

func (s *commitThenFail) TurnInsertHeld(ctx context.Context, nt db.NewTurn) (db.Turn, db.Hold, error) {
	s.calls++
	_, h, err := s.held.TurnInsertHeld(ctx, nt)
	if err != nil {
		return db.Turn{}, nil, err
	}
	if h != nil {
		h.Release()
	}
	return db.Turn{}, nil, errors.New("conn closed")
}

// TestStartAtIntakeFailureAfterCommit: an intake whose statement committed and then failed still
// takes the message (it is recorded, so its sender would never get a reply otherwise), takes the
// thread's lock again, and runs the prompt once.
func TestStartAtIntakeFailureAfterCommit(t *testing.T) {
	pg := dbtest.OpenPostgres(t)
	st := &commitThenFail{Store: pg, held: pg.(heldIntake)}
	rt := &scriptRuntime{}
	f := newFixture(t, st, sandboxfake.New(), rt)
	sink := newCollector()

	tk := submit(t, f.pool, "k", "e1", "one", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "echo: one", out.Answer)
	require.Equal(t, tk.TurnID, out.TurnID)
	require.Equal(t, 1, st.calls)
	require.Len(t, rt.recorded(), 1)
	tr, err := pg.TurnGet(t.Context(), tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnDone, tr.Status)
}

// refuseHeld is a store whose held intake fails before writing anything.
type refuseHeld struct{ db.Store }

func (s refuseHeld) TurnInsertHeld(context.Context, db.NewTurn) (db.Turn, db.Hold, error) {
	return db.Turn{}, nil, errors.New("connection refused")
}

// TestStartAtIntakeFailureNotRecorded: an intake that wrote nothing refuses the message (the platform
// delivers it again) and leaves the thread's queue free for the next one.
func TestStartAtIntakeFailureNotRecorded(t *testing.T) {
	st := refuseHeld{Store: newSQLiteStore(t)}
	f := newFixture(t, st, sandboxfake.New(), &scriptRuntime{})
	_, err := f.pool.Submit(t.Context(), Request{ThreadKey: "k", Platform: "test", ChannelID: "c", UserID: "u",
		EventID: "e1", Text: "one", Sink: newCollector()})
	require.ErrorContains(t, err, "connection refused")
	_, err = st.TurnGetByEvent(t.Context(), "e1")
	require.ErrorIs(t, err, db.ErrNotFound)
	require.NoError(t, f.pool.q.wait(t.Context()))
	require.Zero(t, f.pool.Depth("k"))
}

// commitPastDeadline is a store whose held intake commits the turn, started, and then reports the
// intake's deadline, as a statement whose commit outlived its caller's timeout does; the lock goes
// with the connection.
type commitPastDeadline struct {
	db.Store
	held heldIntake
}

func (s commitPastDeadline) TurnInsertHeld(ctx context.Context, nt db.NewTurn) (db.Turn, db.Hold, error) {
	_, h, err := s.held.TurnInsertHeld(context.WithoutCancel(ctx), nt)
	if err != nil {
		return db.Turn{}, nil, err
	}
	if h != nil {
		h.Release()
	}
	<-ctx.Done()
	return db.Turn{}, nil, fmt.Errorf("insert turn: %w", ctx.Err())
}

// TestStartAtIntakeCommitPastDeadline: an intake whose statement committed the turn started and then
// failed by the intake's own deadline still looks the turn up (on a context of its own, not the
// expired one), takes the message and runs it once. Looked up on the expired context, the lookup
// failed, the message was refused and the turn stayed running, owned by this live process and run
// by nobody: its redelivery is a duplicate of a running turn, so it was never answered.
func TestStartAtIntakeCommitPastDeadline(t *testing.T) {
	pg := dbtest.OpenPostgres(t)
	st := commitPastDeadline{Store: pg, held: pg.(heldIntake)}
	rt := &scriptRuntime{}
	f := newFixture(t, st, sandboxfake.New(), rt)
	f.pool.intakeTimeout = time.Millisecond // the wrapper waits for it, whatever it is
	sink := newCollector()

	tk := submit(t, f.pool, "k", "e1", "one", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "echo: one", out.Answer)
	require.Equal(t, tk.TurnID, out.TurnID)
	require.Len(t, rt.recorded(), 1)
	tr, err := pg.TurnGet(t.Context(), tk.TurnID)
	require.NoError(t, err)
	require.Equal(t, db.TurnDone, tr.Status)
}

// panickyHeld is a store whose held intake panics once.
type panickyHeld struct {
	db.Store
	held     heldIntake
	panicked bool
}

func (s *panickyHeld) TurnInsertHeld(ctx context.Context, nt db.NewTurn) (db.Turn, db.Hold, error) {
	if !s.panicked {
		s.panicked = true
		panic("store blew up")
	}
	return s.held.TurnInsertHeld(ctx, nt)
}

// TestStartAtIntakePanic: a panic while recording a turn at intake refuses that message (it was not
// recorded) instead of leaving its Submit, and the sender's ack, waiting for ever; the thread takes
// the next message.
func TestStartAtIntakePanic(t *testing.T) {
	pg := dbtest.OpenPostgres(t)
	st := &panickyHeld{Store: pg, held: pg.(heldIntake)}
	f := newFixture(t, st, sandboxfake.New(), &scriptRuntime{})
	sink := newCollector()
	done := make(chan error, 1)
	go func() {
		_, err := f.pool.Submit(t.Context(), Request{ThreadKey: "k", Platform: "test", ChannelID: "c", UserID: "u",
			EventID: "e1", Text: "one", Sink: sink})
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "store blew up")
	case <-t.Context().Done():
		t.Fatal("Submit never returned")
	}
	submit(t, f.pool, "k", "e2", "two", sink)
	require.Equal(t, "echo: two", sink.wait(t, 1)[0].Answer)
}
