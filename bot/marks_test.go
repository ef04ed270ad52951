package bot

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
)

// gateReplier records reactions; a 👀 waits for release (a call in flight to a slow platform).
type gateReplier struct {
	chatReplier
	release chan struct{}
}

func (r *gateReplier) React(ctx context.Context, name string) error {
	if name == ReactSeen {
		<-r.release
	}
	return r.chatReplier.React(ctx, name)
}

func (r *gateReplier) reactions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reacts...)
}

// sinkTurns hands each submitted turn's sink to the test.
type sinkTurns struct {
	fakeTurns
	sinks chan agentpool.Sink
}

func (f *sinkTurns) Submit(ctx context.Context, req agentpool.Request) (agentpool.Ticket, error) {
	f.sinks <- req.Sink
	return f.fakeTurns.Submit(ctx, req)
}

// TestFinalMarkWaitsForEyesInFlight: the 👀 of receipt goes from a goroutine of its own; when it is
// still on its way to the platform as the turn ends, the final ✅ waits for it, so the ✅'s removal of
// 👀 comes after 👀 landed and the message ends with ✅ alone.
func TestFinalMarkWaitsForEyesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		turns := &sinkTurns{sinks: make(chan agentpool.Sink, 1)}
		h := NewHandler(HandlerConfig{}, turns, ownerStore{}, nil, nil)
		r := &gateReplier{chatReplier: *newChatReplier(), release: make(chan struct{})}
		require.NoError(t, h.Handle(t.Context(), slackMsg("T1", "C1", "U1", "go"), r))
		sink := <-turns.sinks
		synctest.Wait() // 👀 is on its way
		delivered := make(chan struct{})
		go func() {
			defer close(delivered)
			_, err := sink.Deliver(context.Background(), agentpool.Outcome{TurnID: 1, Answer: "done"})
			require.NoError(t, err)
		}()
		synctest.Wait()
		require.Empty(t, r.reactions(), "the answer is posted, and ✅ waits for 👀")
		close(r.release)
		<-delivered
		require.NoError(t, h.Wait(t.Context()))
		require.Equal(t, []string{ReactSeen, ReactDone}, r.reactions())
	})
}

// TestEyesAfterTheFinalMarkAreDropped: a 👀 that reaches the replier after the final mark would stay
// on an answered message; it is not sent.
func TestEyesAfterTheFinalMarkAreDropped(t *testing.T) {
	for _, final := range []string{ReactDone, ReactError} {
		t.Run(final, func(t *testing.T) {
			r := newChatReplier()
			m := withOrderedMarks(r)
			require.NoError(t, m.React(t.Context(), final))
			require.NoError(t, m.React(t.Context(), ReactSeen))
			require.Equal(t, []string{final}, r.reacts)
		})
	}
	r := newChatReplier()
	m := withOrderedMarks(r)
	require.NoError(t, m.React(t.Context(), ReactSkipped))
	require.NoError(t, m.React(t.Context(), ReactSeen))
	require.Equal(t, []string{ReactSkipped, ReactSeen}, r.reacts, "only a final mark drops a later 👀")
}

// TestEyesAfterACancelledFinalMarkAreDropped: a final mark whose context ended before it was sent
// still marks the message as ended, so no 👀 follows.
func TestEyesAfterACancelledFinalMarkAreDropped(t *testing.T) {
	r := newChatReplier()
	m := withOrderedMarks(r)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	m.turn <- struct{}{} // another reaction is under way
	require.ErrorIs(t, m.React(ctx, ReactDone), context.Canceled)
	<-m.turn
	require.NoError(t, m.React(t.Context(), ReactSeen))
	require.Empty(t, r.reacts)
}
