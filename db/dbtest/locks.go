package dbtest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// holdProbe is how long a probe waits for a lock that must stay held. It is not synchronization:
// a correct lock makes the probe time out whatever the value; a broken one lets it in at once.
const holdProbe = 200 * time.Millisecond

// requireHeld asserts that key cannot be locked within holdProbe.
func requireHeld(t *testing.T, s db.Store, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), holdProbe)
	defer cancel()
	unlock, err := s.LockThread(ctx, key)
	if err == nil {
		unlock()
		t.Fatalf("locked %q while another holder had it", key)
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// testLockSameKeySerial: a second holder of a key runs only after the first unlocks.
func testLockSameKeySerial(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	unlockA, err := s.LockThread(ctx, "slack:T:C:1")
	require.NoError(t, err)

	requireHeld(t, s, "slack:T:C:1")

	events := make(chan string, 2)
	bDone := make(chan error, 1)
	go func() {
		unlock, err := s.LockThread(ctx, "slack:T:C:1")
		if err == nil {
			events <- "B locked"
			unlock()
		}
		bDone <- err
	}()
	// A logs its release before releasing; B can only log after acquiring. With a working lock the
	// order is fixed.
	events <- "A unlocking"
	unlockA()
	require.NoError(t, <-bDone)
	require.Equal(t, "A unlocking", <-events)
	require.Equal(t, "B locked", <-events)

	unlockA() // idempotent: must not release someone else's hold
	unlockC, err := s.LockThread(ctx, "slack:T:C:1")
	require.NoError(t, err)
	requireHeld(t, s, "slack:T:C:1")
	unlockC()
}

// testLockMutualExclusion: many goroutines contending for one key never overlap.
func testLockMutualExclusion(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	var (
		inside, maxInside, total atomic.Int32
		wg                       sync.WaitGroup
	)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				unlock, err := s.LockThread(ctx, "k")
				if !assertNoError(t, err) {
					return
				}
				n := inside.Add(1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				runtime.Gosched() // give an overlapping holder every chance to show up
				total.Add(1)
				inside.Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), maxInside.Load())
	require.Equal(t, int32(50), total.Load())
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// testLockDifferentKeysParallel: holding one key does not block another.
func testLockDifferentKeysParallel(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	unlockA, err := s.LockThread(ctx, "key-1")
	require.NoError(t, err)
	defer unlockA()

	got := make(chan error, 1)
	go func() {
		unlock, err := s.LockThread(ctx, "key-2")
		if err == nil {
			unlock()
		}
		got <- err
	}()
	require.NoError(t, <-got, "B locks key-2 while A still holds key-1")
	requireHeld(t, s, "key-1")
}

// testLockCancelledWait: a wait ended by its context leaves the lock working for everyone else.
func testLockCancelledWait(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	unlockA, err := s.LockThread(ctx, "k")
	require.NoError(t, err)

	waitCtx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		unlock, err := s.LockThread(waitCtx, "k")
		if err == nil {
			unlock()
		}
		got <- err
	}()
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)

	requireHeld(t, s, "k")
	unlockA()
	unlockB, err := s.LockThread(ctx, "k")
	require.NoError(t, err)
	unlockB()

	_, err = s.LockThread(ctx, "")
	require.ErrorIs(t, err, db.ErrInvalid)
}

func testLeader(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	l, ok, err := s.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case <-l.Lost():
		t.Fatal("leadership lost before release")
	default:
	}
	l.Release()
	<-l.Lost()
	l.Release() // idempotent

	l2, ok, err := s.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok, "leadership can be taken again after release")
	l2.Release()
}

func testCloseReleasesLeader(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	l, ok, err := s.TryLeader(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	unlock, err := s.LockThread(ctx, "held at close")
	require.NoError(t, err)

	require.NoError(t, s.Close())
	<-l.Lost()
	unlock() // after Close: a no-op, not a hang or a panic
	l.Release()
	_, _, err = s.TryLeader(ctx)
	require.Error(t, err)
}

// testCloseEndsHolds: Hold's contract is that Lost closes on Store.Close, so a holder tied to
// hold.Context() stops; and a closed store hands out no new locks.
func testCloseEndsHolds(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	thread, err := s.HoldThread(ctx, "held at close")
	require.NoError(t, err)
	instance, err := s.HoldInstance(ctx, "i-close")
	require.NoError(t, err)

	require.NoError(t, s.Close())
	for name, h := range map[string]db.Hold{"thread": thread, "instance": instance} {
		select {
		case <-h.Lost():
		default:
			t.Fatalf("%s hold not lost at Close", name)
		}
		require.Error(t, h.Context().Err(), name)
		h.Release() // after Close: a no-op, not a hang or a panic
	}
	_, err = s.HoldThread(ctx, "after close")
	require.Error(t, err, "HoldThread on a closed store")
	_, err = s.LockThread(ctx, "after close")
	require.Error(t, err, "LockThread on a closed store")
	_, err = s.HoldInstance(ctx, "i-after")
	require.Error(t, err, "HoldInstance on a closed store")
}
