package bot

import (
	"context"
	"sync/atomic"
)

// markedReplier orders the reactions on one message. 👀 is sent from a goroutine of its own, off the
// ack path, so without this a quick turn's final ✅ or ❌ (which removes 👀) could overtake it, and 👀
// would land afterwards and stay on an answered message for good: the "waiting forever" look that
// acknowledged-means-answered exists to prevent. So reactions go one at a time, and a 👀 that comes
// after a final mark is dropped.
type markedReplier struct {
	Replier
	// turn is held across a reaction's call (a channel, not a mutex, so that a reaction waiting
	// for another is durably blocked in a synctest bubble).
	turn chan struct{}
	// final is set as a final mark is asked for, before it waits its turn: a 👀 behind it, or a
	// final mark whose context ends while it waits, must not let a later 👀 through.
	final atomic.Bool
}

func withOrderedMarks(r Replier) *markedReplier {
	return &markedReplier{Replier: r, turn: make(chan struct{}, 1)}
}

// React implements Replier.
func (m *markedReplier) React(ctx context.Context, name string) error {
	if name == ReactDone || name == ReactError {
		m.final.Store(true)
	}
	select {
	case m.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-m.turn }()
	if name == ReactSeen && m.final.Load() {
		return nil
	}
	return m.Replier.React(ctx, name)
}
