package agentpool

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
)

// endDownStore fails every write that records a turn's end or delivery while down is set, as a
// database that is unreachable for longer than a write's retry window.
type endDownStore struct {
	db.Store
	down atomic.Bool
}

func (s *endDownStore) TurnFinish(ctx context.Context, id int64, r db.TurnResult) (db.Turn, error) {
	if s.down.Load() {
		return db.Turn{}, errConnLost
	}
	return s.Store.TurnFinish(ctx, id, r)
}

func (s *endDownStore) TurnMarkDelivered(ctx context.Context, id int64) error {
	if s.down.Load() {
		return errConnLost
	}
	return s.Store.TurnMarkDelivered(ctx, id)
}

// TestAdoptRecordsAnEndThatCouldNotBeWritten: a turn whose reply was posted while its end could not
// be recorded (the database was down for the whole retry window) is left running in the store.
// The adoption pass records the end it posted, done and delivered, and posts nothing more: left
// running, the turn was answered a second time, as interrupted, once this process had gone.
func TestAdoptRecordsAnEndThatCouldNotBeWritten(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		ds := &endDownStore{Store: st}
		restored := newCollector()
		p := newAdoptPool(t, ds, clock, &scriptRuntime{}, restored)
		p.writeRetryFor = 0 // the store is down for longer than any retry window
		sink := newCollector()
		ds.down.Store(true)
		tk, err := p.Submit(ctx, Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello",
			Sink: sink, Delivery: json.RawMessage(`{}`)})
		require.NoError(t, err)
		require.Equal(t, "echo: hello", sink.wait(t, 1)[0].Answer)
		require.NoError(t, p.q.wait(ctx))
		tr, err := st.TurnGet(ctx, tk.TurnID)
		require.NoError(t, err)
		require.Equal(t, db.TurnRunning, tr.Status, "the end was not recorded")

		rep, err := p.AdoptPass(ctx)
		require.NoError(t, err, "a pass while the store is still down keeps the end for later")
		require.Zero(t, rep.Recorded)
		ds.down.Store(false)
		clock.Advance(DefaultAdoptAfter + 1)
		rep, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{Recorded: 1}, rep)
		tr, err = st.TurnGet(ctx, tk.TurnID)
		require.NoError(t, err)
		require.Equal(t, db.TurnDone, tr.Status)
		require.Equal(t, "echo: hello", tr.Answer)
		require.False(t, tr.DeliveredAt.IsZero(), "posted already: never posted again")

		clock.Advance(DefaultAdoptAfter + 1)
		rep, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep, "recorded once, then forgotten")
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, sink.got, "exactly one reply")
		require.Empty(t, restored.got, "nothing answered through a restored request")
	})
}

// TestAdoptAnswersARunningOrphanAsInterrupted: a turn recorded running, owned by this live process
// and held by no job here (its intake committed it started, then failed, and its lookup failed
// too: the message was refused, and its redelivery is a duplicate of a running turn) is answered
// once, as interrupted, by the adoption pass; its prompt never runs. Before, nobody answered it while
// the process lived.
func TestAdoptAnswersARunningOrphanAsInterrupted(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		restored := newCollector()
		rt := &scriptRuntime{}
		p := newAdoptPool(t, st, clock, rt, restored)
		tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: "k", PlatformEventID: "e1", UserID: "u", Prompt: "hello",
			Delivery: json.RawMessage(`{}`), Owner: p.Instance()})
		require.NoError(t, err)
		_, err = st.TurnStart(ctx, tr.ID, p.Instance())
		require.NoError(t, err)

		rep, err := p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep, "within the grace period it is left alone")
		clock.Advance(DefaultAdoptAfter + 1)
		rep, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{Interrupted: 1}, rep)
		out := restored.wait(t, 1)[0]
		require.ErrorIs(t, out.Err, ErrInterrupted)
		require.Equal(t, tr.ID, out.TurnID)
		require.NoError(t, p.q.wait(ctx))

		clock.Advance(DefaultAdoptAfter + 1)
		rep, err = p.AdoptPass(ctx)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep)
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, restored.got, "exactly one reply")
		require.Empty(t, rt.recorded(), "its prompt never runs")
		got, err := st.TurnGet(ctx, tr.ID)
		require.NoError(t, err)
		require.Equal(t, db.TurnFailed, got.Status)
		require.Equal(t, InterruptedText, got.Error, "so that retry finds it")
		require.False(t, got.DeliveredAt.IsZero())
	})
}

// TestAdoptLeavesARunningTurnAlone: a turn running here, however long, is not touched by the
// adoption pass: it gets its one reply from its run.
func TestAdoptLeavesARunningTurnAlone(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		entered, gate := make(chan struct{}, 1), make(chan struct{})
		rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, pr runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
			entered <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return runtime.Result{}, ctx.Err()
			}
			return runtime.Result{Answer: "echo: " + pr.Text}, nil
		}}
		restored := newCollector()
		p := newAdoptPool(t, st, clock, rt, restored)
		sink := newCollector()
		tk, err := p.Submit(ctx, Request{ThreadKey: "k", Platform: "test", EventID: "e1", Text: "hello",
			Sink: sink, Delivery: json.RawMessage(`{}`)})
		require.NoError(t, err)
		<-entered
		clock.Advance(DefaultAdoptAfter + 1)
		rep, err := p.AdoptPass(ctx)
		close(gate)
		require.NoError(t, err)
		require.Equal(t, AdoptReport{}, rep)
		out := sink.wait(t, 1)[0]
		require.NoError(t, out.Err)
		require.Equal(t, "echo: hello", out.Answer)
		require.NoError(t, p.Shutdown(ctx))
		require.Empty(t, sink.got)
		require.Empty(t, restored.got)
		got, err := st.TurnGet(ctx, tk.TurnID)
		require.NoError(t, err)
		require.Equal(t, db.TurnDone, got.Status)
	})
}
