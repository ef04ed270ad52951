package agentpool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// An "admin drain" written in a chat thread runs on that thread's queue (Pool.Do). Drain used to
// wait for every queue to empty, its own included, so it never returned: the admin got no answer,
// the audit no outcome, and the thread's queue stayed blocked until shutdown.
func TestDrainFromAThreadsQueueDoesNotWaitForItself(t *testing.T) {
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), &scriptRuntime{})
	ops := Ops{Pool: f.pool}

	// Another thread's job is running: drain must still wait for it.
	otherStarted, releaseOther := make(chan struct{}), make(chan struct{})
	require.NoError(t, f.pool.Do("web:other", func(context.Context) {
		close(otherStarted)
		<-releaseOther
	}, nil))
	<-otherStarted

	done := make(chan error, 1)
	require.NoError(t, f.pool.Do("web:admin", func(ctx context.Context) {
		// The deadline only keeps a regression from hanging the test run; it is never reached
		// when Drain works.
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		done <- ops.Drain(dctx)
	}, nil))

	require.Eventually(t, f.pool.Draining, time.Minute, time.Millisecond, "intake is closed at once")
	select {
	case err := <-done:
		t.Fatalf("drain returned (%v) while another thread's job was still running", err)
	default:
	}
	close(releaseOther)
	require.NoError(t, <-done, "drain returns once only its own thread is left")
}
