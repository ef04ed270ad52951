package agentpool

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
)

func TestQueueRunsEachKeyInOrderAndKeysInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueues(context.Background())
		var mu sync.Mutex
		got := map[string][]int{}
		release := make(chan struct{})
		for i := range 50 {
			for _, k := range []string{"a", "b"} {
				_, err := q.add(k, 0, func(context.Context) {
					<-release
					mu.Lock()
					got[k] = append(got[k], i)
					mu.Unlock()
				}, nil)
				require.NoError(t, err)
			}
		}
		synctest.Wait()
		require.Equal(t, 2, q.activeKeys(), "one goroutine per busy key")
		require.Equal(t, 50, q.depth("a"))
		close(release)
		require.NoError(t, q.wait(context.Background()))
		want := make([]int, 50)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, got["a"])
		require.Equal(t, want, got["b"])
		require.Equal(t, 0, q.activeKeys())
		require.Equal(t, 0, q.depth("a"))
		require.Empty(t, q.byKey, "idle keys hold nothing")
	})
}

func TestQueueAheadCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueues(context.Background())
		block := make(chan struct{})
		for i := range 3 {
			ahead, err := q.add("k", 0, func(context.Context) { <-block }, nil)
			require.NoError(t, err)
			require.Equal(t, i, ahead)
		}
		close(block)
		require.NoError(t, q.wait(context.Background()))
	})
}

func TestQueueCancelRunningAndCloseWithoutDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueues(context.Background())
		started := make(chan struct{})
		var cancelled, dropped bool
		_, err := q.add("k", 0, func(ctx context.Context) { close(started); <-ctx.Done(); cancelled = true }, nil)
		require.NoError(t, err)
		_, err = q.add("k", 0, func(context.Context) { t.Error("discarded job ran") }, func(error) { dropped = true })
		require.NoError(t, err)
		<-started
		require.False(t, q.cancelRunning("other", 0, nil))
		for _, d := range q.close(false, ErrClosed) {
			d()
		}
		require.NoError(t, q.wait(context.Background()))
		require.True(t, cancelled)
		require.True(t, dropped)
		_, err = q.add("k", 0, func(context.Context) {}, nil)
		require.ErrorIs(t, err, ErrClosed)
	})
}

func TestQueueCancelRunningOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueues(context.Background())
		started := make(chan struct{})
		var second bool
		_, _ = q.add("k", 1, func(ctx context.Context) { close(started); <-ctx.Done() }, nil)
		_, _ = q.add("k", 2, func(ctx context.Context) { second = ctx.Err() == nil }, nil)
		<-started
		require.True(t, q.cancelRunning("k", 0, ErrCancelled))
		require.NoError(t, q.wait(context.Background()))
		require.True(t, second, "cancel stops the running turn, not the ones queued behind it")
	})
}

func TestQueueIdleKeysHoldNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueues(context.Background())
		for i := range 1000 {
			_, err := q.add(fmt.Sprint("thread-", i), 0, func(context.Context) {}, nil)
			require.NoError(t, err)
		}
		require.NoError(t, q.wait(context.Background()))
		synctest.Wait() // let the drained goroutines finish returning
		require.Equal(t, 0, q.activeKeys())
		require.Zero(t, drainGoroutines(), "drained keys leave no goroutine behind")
	})
}

// drainGoroutines counts goroutines running a queue's drain loop, from a full stack dump: exact, and
// blind to goroutines other tests leave behind.
func drainGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "agentpool.(*queues).drain(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A user's stop (cancelRunning with id 0) cuts a running turn, and never other work on the thread's
// queue: a reset's destroy, a provider move or an admin job cut half way would leave it half done.
func TestQueueStopCancelsTurnsOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(q *queues, run func(context.Context)) error
		want bool
	}{
		{"recorded turn", func(q *queues, run func(context.Context)) error {
			_, err := q.add("k", 7, run, nil)
			return err
		}, true},
		{"turn started at intake, before its record", func(q *queues, run func(context.Context)) error {
			_, ok, err := q.addIfIdle(nil, "k", run, nil)
			require.True(t, ok)
			return err
		}, true},
		{"other work (reset, move, admin job)", func(q *queues, run func(context.Context)) error {
			_, err := q.add("k", 0, run, nil)
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newQueues(context.Background())
				started, finish := make(chan struct{}), make(chan struct{})
				var cut bool
				require.NoError(t, tc.add(q, func(ctx context.Context) {
					close(started)
					select {
					case <-ctx.Done():
						cut = true
					case <-finish:
					}
				}))
				<-started
				require.Equal(t, tc.want, q.cancelRunning("k", 0, ErrCancelled))
				synctest.Wait()
				close(finish)
				require.NoError(t, q.wait(context.Background()))
				require.Equal(t, tc.want, cut)
			})
		})
	}
}
