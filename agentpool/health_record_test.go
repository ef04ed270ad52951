package agentpool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// sessionBlockRuntime is a scriptRuntime whose Session, once armed, waits for the turn to be
// cancelled.
type sessionBlockRuntime struct {
	*scriptRuntime
	armed     atomic.Bool
	inSession chan struct{}
}

func (r *sessionBlockRuntime) Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (string, bool, error) {
	if r.armed.Load() {
		close(r.inSession)
		<-ctx.Done()
		return "", false, ctx.Err()
	}
	return r.scriptRuntime.Session(ctx, sb, prevID, title)
}

// TestResumedRuntimeAnsweredResetsFailCountEvenIfCancelled (from a review of f9faeea): once the runtime of
// a resumed sandbox answered, the resume is complete and the failed-resume count is reset
// (healthDue's doc). Before f9faeea that write followed Ensure at once; now it waits for the agent
// session and goes with it, and on the Session failure path it is written with the turn's ctx: a
// turn stopped while its agent session is being opened leaves the count standing, and the next
// failures recreate the sandbox (its files lost) sooner than max_resume_failures says.
func TestResumedRuntimeAnsweredResetsFailCountEvenIfCancelled(t *testing.T) {
	rt := &sessionBlockRuntime{
		scriptRuntime: &scriptRuntime{ensureErrs: []error{errors.New("health: 500"), errors.New("health: 500")}},
		inSession:     make(chan struct{}),
	}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt)
	sink := newCollector()
	submit(t, f.pool, "web:rc", "e1", "x", sink)
	require.ErrorContains(t, sink.wait(t, 1)[0].Err, "health: 500")
	sess, err := f.store.SessionGet(context.Background(), "web:rc")
	require.NoError(t, err)
	require.Equal(t, 1, sess.ResumeFailCount)

	rt.armed.Store(true)
	submit(t, f.pool, "web:rc", "e2", "y", sink)
	<-rt.inSession // resumed, and the runtime answered Ensure
	require.True(t, f.pool.Cancel("web:rc"))
	require.True(t, sink.wait(t, 1)[0].Cancelled)
	sess, err = f.store.SessionGet(context.Background(), "web:rc")
	require.NoError(t, err)
	require.Equal(t, db.SessionActive, sess.Status)
	require.Zero(t, sess.ResumeFailCount, "the runtime answered: the resume is complete")
}

// transcriptFailStore fails every transcript read: the history of a new sandbox cannot be loaded.
type transcriptFailStore struct{ db.Store }

func (transcriptFailStore) TurnTranscript(context.Context, string, db.TranscriptLimit) ([]db.Turn, error) {
	return nil, errors.New("transcript: connection reset")
}

// TestRuntimeHealthRecordedWhenHistoryFails (from a review of f9faeea): a new sandbox's runtime
// answered, then the thread's history could not be loaded for its new agent session. The turn
// fails, but the runtime's health is recorded (it answered), and the agent session is not: the next
// turn must replay the history to a session, so it opens one again.
func TestRuntimeHealthRecordedWhenHistoryFails(t *testing.T) {
	st := transcriptFailStore{Store: newSQLiteStore(t)}
	f := newFixture(t, st, sandboxfake.New(), &scriptRuntime{})
	sink := newCollector()
	submit(t, f.pool, "web:hist", "e1", "x", sink)
	require.ErrorContains(t, sink.wait(t, 1)[0].Err, "history")
	sess, err := st.SessionGet(context.Background(), "web:hist")
	require.NoError(t, err)
	require.Equal(t, db.SessionActive, sess.Status)
	require.False(t, sess.LastHealthOKAt.IsZero(), "the runtime answered: recorded")
	require.Empty(t, sess.AgentSessionID, "no session without its history")
}
