package bot

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

type recorder struct {
	mu    sync.Mutex
	texts []string
	at    []time.Time
	fail  []error
}

func (r *recorder) send(_ context.Context, text string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fail) > 0 {
		err := r.fail[0]
		r.fail = r.fail[1:]
		if err != nil {
			return err
		}
	}
	r.texts = append(r.texts, text)
	r.at = append(r.at, time.Now())
	return nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.texts...)
}

func TestCoalescerAtMostOnePerIntervalAndLastStateDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{}
		c := NewCoalescer(context.Background(), 2*time.Second, r.send)
		start := time.Now()
		for i := range 100 {
			c.Update(fmt.Sprint("state ", i))
			time.Sleep(100 * time.Millisecond) // fake time: 10 s of progress
		}
		require.NoError(t, c.Flush(context.Background()))
		synctest.Wait()
		require.Equal(t, "state 99", r.texts[len(r.texts)-1], "the last state is always delivered")
		for i := 1; i < len(r.at)-1; i++ {
			require.GreaterOrEqual(t, r.at[i].Sub(r.at[i-1]), 2*time.Second, "at most one per interval")
		}
		require.LessOrEqual(t, len(r.texts), 7, "10 s at 2 s intervals plus the final flush")
		require.Equal(t, start.Add(10*time.Second), time.Now())
	})
}

func TestCoalescerBacksOffOnRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{fail: []error{nil, &RateLimitedError{RetryAfter: 30 * time.Second}}}
		c := NewCoalescer(context.Background(), time.Second, r.send)
		c.Update("a")
		synctest.Wait()
		time.Sleep(time.Second)
		c.Update("b") // rate limited
		synctest.Wait()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		require.Equal(t, []string{"a"}, r.got(), "nothing sent during Retry-After")
		time.Sleep(25 * time.Second)
		synctest.Wait()
		require.Equal(t, []string{"a", "b"}, r.got(), "the refused state is offered again after the wait")
	})
}

func TestCoalescerUpdateNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		c := NewCoalescer(context.Background(), 0, func(context.Context, string) error { <-release; return nil })
		c.Update("x")
		synctest.Wait() // the send is now in flight and stuck
		for range 1000 {
			c.Update("y") // must return at once
		}
		close(release)
		require.NoError(t, c.Flush(context.Background()))
	})
}

// A platform that never answers a progress edit (a connection that hangs; the API client has no
// overall timeout) must not hold the turn's final state, and so its answer, forever: every send is
// bounded, and Flush returns once the stuck edits have timed out.
func TestCoalescerStuckPlatformDoesNotHoldTheFlush(t *testing.T) {
	for _, tc := range []struct {
		name      string
		inFlight  bool // a timer send is stuck when Flush starts
		wantSends int
	}{
		{"stuck in-flight edit, then stuck final", true, 2},
		{"stuck final only", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				sends := 0
				stuck := func(ctx context.Context, _ string) error {
					mu.Lock()
					sends++
					mu.Unlock()
					<-ctx.Done() // the platform never answers; only the context ends the call
					return ctx.Err()
				}
				c := NewCoalescer(context.Background(), time.Second, stuck)
				start := time.Now()
				if tc.inFlight {
					c.Update("working…")
					synctest.Wait() // the edit is in flight, and stuck
				}
				c.Update("done")
				err := c.Flush(context.Background()) // as Deliver's: the pool's context has no deadline
				if !tc.inFlight {
					// (With an edit in flight, the timer sends the final state itself and Flush does
					// not see that send's error.)
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				require.LessOrEqual(t, time.Since(start), 2*progressSendTimeout+time.Second, "the flush waited out at most two bounded sends and one interval")
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				require.Equal(t, tc.wantSends, sends)
			})
		})
	}
}

// A flush the platform refused with a Retry-After holds the next send until the wait is over: the
// caller's update after it would otherwise be refused again at once, and dropped.
func TestCoalescerFlushRateLimitedHoldsTheNextSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{}
		c := NewCoalescer(context.Background(), time.Second, r.send)
		c.Update("working…")
		synctest.Wait() // sent; the next update waits for the interval
		r.mu.Lock()
		r.fail = []error{&RateLimitedError{RetryAfter: 5 * time.Second}}
		r.mu.Unlock()
		c.Update("done in 12s")
		var rl *RateLimitedError
		require.ErrorAs(t, c.Flush(context.Background()), &rl)
		require.Equal(t, []string{"working…"}, r.got(), "the refused state is not offered again by itself")
		c.Update("done in 12s")
		time.Sleep(4 * time.Second)
		synctest.Wait()
		require.Equal(t, []string{"working…"}, r.got(), "not before the platform's Retry-After")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Equal(t, []string{"working…", "done in 12s"}, r.got())
	})
}
