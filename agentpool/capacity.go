package agentpool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// Capacity: Config.MaxActive caps the sandboxes that are live at once across the deployment (a live
// session is creating, active, resuming or pausing; paused sandboxes cost little and do not count).
// A turn whose thread has no live sandbox is admitted only below the cap. At the cap, it first tries
// to pause the least recently used idle sandbox (one with no turn running or queued); if every live
// sandbox is busy, it waits in line, told its place, and runs when a slot frees. Waiting ends early
// when the turn is cancelled.
//
// The count is read from the store, so replicas share the cap; admissions in flight in this process
// (granted but not yet live in the store) are counted too, so two new threads cannot both take the
// last slot here. Across replicas the cap can be overshot by the admissions racing in the same
// instant: it bounds cost, it is not a lock.

// NoteInLine is the status note of a turn waiting in line for a sandbox slot: every live sandbox is
// busy; the event's Place is the turn's place in line, its Max the cap.
const NoteInLine = "in_line"

// capacityRecheck is how often a waiting turn looks again without being woken (a slot freed by
// another replica wakes nobody here).
const capacityRecheck = 2 * time.Second

// evictWait bounds pausing one idle sandbox to make room.
const evictWait = 30 * time.Second

type capacity struct {
	max int

	// mu protects the following.
	mu      sync.Mutex
	pending map[string]int // thread → admissions granted and not yet released
	line    []*waiter      // waiting turns, oldest first
	changed chan struct{}  // closed and replaced when a slot may have freed
}

type waiter struct{ thread string }

func newCapacity(max int) *capacity {
	return &capacity{max: max, pending: map[string]int{}, changed: make(chan struct{})}
}

// signal wakes the waiters to look again.
func (c *capacity) signal() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// admit blocks until the thread may have a live sandbox, and returns the release to call when the
// turn ends. With no cap it returns at once.
func (p *Pool) admit(ctx context.Context, threadKey string, sink Sink) (release func(), err error) {
	c := p.capa
	if c == nil || c.max <= 0 {
		return func() {}, nil
	}
	w := &waiter{thread: threadKey}
	queued := false
	defer func() {
		if queued {
			c.mu.Lock()
			for i, x := range c.line {
				if x == w {
					c.line = append(c.line[:i], c.line[i+1:]...)
					break
				}
			}
			c.mu.Unlock()
			c.signal() // the next in line may now be its head
		}
	}()
	evicted := false
	lastPlace := 0
	// wait waits for a slot to free (or a recheck), telling the user their place when it changed.
	wait := func(changed <-chan struct{}, place int) error {
		if place != lastPlace {
			lastPlace = place
			sink.Progress(runtime.Event{Kind: runtime.EventStatus, Note: NoteInLine, Place: place, Max: c.max, At: p.now()})
		}
		t := time.NewTimer(capacityRecheck)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-changed:
		case <-t.C:
		}
		evicted = false
		return nil
	}
	for {
		if queued {
			// Only the head of the line reads the store: otherwise every freed slot would wake
			// every waiter into the same queries (a thundering herd that, with 2,000 waiting
			// threads, starved the store).
			c.mu.Lock()
			head, place, changed := c.line[0] == w, placeIn(c.line, w), c.changed
			c.mu.Unlock()
			if !head {
				if err := wait(changed, place); err != nil {
					return nil, err
				}
				continue
			}
		}
		live, err := p.liveThreads(ctx, threadKey, c.max+1)
		if err != nil {
			return nil, fmt.Errorf("counting live sandboxes: %w", err)
		}
		c.mu.Lock()
		changed := c.changed
		// A newcomer is first only when nobody waits: the head of the line, woken by a freed slot,
		// must not lose it to a turn that arrived after it.
		first := len(c.line) == 0 || (queued && c.line[0] == w)
		if c.grant(live, threadKey, first) {
			c.mu.Unlock()
			return func() { p.releaseAdmission(threadKey) }, nil
		}
		if !queued {
			c.line = append(c.line, w)
			queued = true
		}
		place := placeIn(c.line, w)
		c.mu.Unlock()
		if !evicted && first {
			// Make room by pausing an idle sandbox, once per turn; a failure leaves us in line.
			evicted = p.evictIdle(ctx, live)
			if evicted {
				continue
			}
		}
		if err := wait(changed, place); err != nil {
			return nil, err
		}
	}
}

// grant admits threadKey if its sandbox is live, or if it is first and a slot is free, counting
// the admissions granted here that are not live yet; c.mu is held.
func (c *capacity) grant(live map[string]bool, threadKey string, first bool) bool {
	used := len(live)
	for k := range c.pending {
		if !live[k] {
			used++
		}
	}
	if live[threadKey] || (first && used < c.max) {
		c.pending[threadKey]++
		return true
	}
	return false
}

// tryAdmit is admit without waiting: it admits the thread if admit would at once (with no cap,
// always), and otherwise reports false having changed nothing (no line, no eviction).
func (p *Pool) tryAdmit(ctx context.Context, threadKey string) (release func(), ok bool) {
	c := p.capa
	if c == nil || c.max <= 0 {
		return func() {}, true
	}
	live, err := p.liveThreads(ctx, threadKey, c.max+1)
	if err != nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.grant(live, threadKey, len(c.line) == 0) {
		return nil, false
	}
	return func() { p.releaseAdmission(threadKey) }, true
}

// placeIn is w's place in line, from 1 (0: not in it).
func placeIn(line []*waiter, w *waiter) int {
	for i, x := range line {
		if x == w {
			return i + 1
		}
	}
	return 0
}

func (p *Pool) releaseAdmission(threadKey string) {
	c := p.capa
	c.mu.Lock()
	if c.pending[threadKey]--; c.pending[threadKey] <= 0 {
		delete(c.pending, threadKey)
	}
	c.mu.Unlock()
	c.signal()
}

// liveThreads returns the threads whose sandbox is live, at most limit of them, threadKey's among
// them if it is live. One query: it runs for every turn's admission.
func (p *Pool) liveThreads(ctx context.Context, threadKey string, limit int) (map[string]bool, error) {
	keys, err := p.store.SessionsLive(ctx, threadKey, limit)
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(keys))
	for _, k := range keys {
		live[k] = true
	}
	return live, nil
}

// evictIdle pauses the least recently active sandbox that has no turn running or queued here and no
// admission pending, and reports whether one was paused.
func (p *Pool) evictIdle(ctx context.Context, live map[string]bool) bool {
	cands, err := p.store.SessionsIdle(ctx, p.now(), p.capa.max+1)
	if err != nil {
		p.log.Warn("capacity: listing idle sandboxes", zap.Error(err))
		return false
	}
	for _, s := range cands {
		p.capa.mu.Lock()
		busy := p.capa.pending[s.ThreadKey] > 0
		p.capa.mu.Unlock()
		if busy || p.q.depth(s.ThreadKey) > 0 || !live[s.ThreadKey] {
			continue
		}
		ectx, cancel := context.WithTimeout(ctx, evictWait)
		err := p.Pause(ectx, s.ThreadKey)
		cancel()
		if err != nil {
			p.log.Info("capacity: could not pause an idle sandbox", zap.String("thread", s.ThreadKey), zap.Error(err))
			continue
		}
		p.log.Info("capacity: paused the least recently used idle sandbox to make room", zap.String("thread", s.ThreadKey))
		return true
	}
	return false
}
