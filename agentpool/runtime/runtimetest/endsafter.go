package runtimetest

import (
	"context"
	"sync/atomic"
)

// EndsAfter is a context that ends once End is called, for whoever looks at it from then on: calls
// in flight keep the Done they took. It stands for a caller that gives up in an instant too narrow
// to hit on purpose with a real cancel (after a resubscription succeeded and before the turn took
// the new stream, say).
type EndsAfter struct {
	context.Context
	end atomic.Bool
}

var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// End makes the context read as cancelled from now on.
func (c *EndsAfter) End() { c.end.Store(true) }

// Done implements context.Context.
func (c *EndsAfter) Done() <-chan struct{} {
	if c.end.Load() {
		return closedDone
	}
	return c.Context.Done()
}

// Err implements context.Context.
func (c *EndsAfter) Err() error {
	if c.end.Load() {
		return context.Canceled
	}
	return c.Context.Err()
}
