package agentpool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// placeSink reports the places in line a turn is told.
type placeSink struct{ places chan int }

func (s placeSink) Progress(ev runtime.Event) {
	if ev.Note == NoteInLine {
		s.places <- ev.Place
	}
}

func (s placeSink) Deliver(context.Context, Outcome) ([]string, error) { return nil, nil }

// TestCapacityNewcomerQueuesBehindTheLine: a new turn that finds a free slot while others wait in
// line joins the line behind them. It took the slot: a slot freed wakes the head of the line, which
// must read the store before it can take it, and a newcomer arriving meanwhile (or after the head
// paused an idle sandbox to make room) got there first, so under a steady stream of new threads
// the head could wait for ever.
func TestCapacityNewcomerQueuesBehindTheLine(t *testing.T) {
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), &scriptRuntime{}, func(c *Config) { c.MaxActive = 1 })
	c := f.pool.capa
	// The head of the line, woken by a freed slot but not yet looking: nothing is live or pending.
	head := &waiter{thread: "head"}
	c.mu.Lock()
	c.line = append(c.line, head)
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sink := placeSink{places: make(chan int, 16)}
	done := make(chan error, 1)
	go func() {
		release, err := f.pool.admit(ctx, "newcomer", sink)
		if release != nil {
			release()
		}
		done <- err
	}()
	select {
	case place := <-sink.places:
		require.Equal(t, 2, place, "the newcomer waits behind the head")
	case err := <-done:
		t.Fatalf("the newcomer took the slot the head of the line waits for (err %v)", err)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, []*waiter{head}, c.line, "the cancelled newcomer left the line")
}
