package agentpool

import (
	"context"
	"sync"
	"time"
)

// The start gate: how many turns do their start at once.
//
// A turn's start (once it holds its thread's lock: the turn and session rows, resolving the sandbox,
// the agent session, the history) is a run of short statements and calls that want the CPU, the bot's and the
// database's. Messages are acknowledged on the same CPUs, and each ack waits for its message's
// commit. When many turns start together (a burst of messages to idle threads, a restart that takes
// over queued turns, a provider that comes back), every start ran at once, and the acks waited
// behind all of them: at 2,000 Slack events/s with every event starting a turn on a 2-core machine,
// the worst acks of a burst's first 150 ms took 20–45 ms (BenchmarkEventsAck/pool+agent; the lock
// pool lets 31 turns start). The gate lets about one start per CPU run at once; the others wait for
// a place without holding the CPU. The same starts run in about the same time, and the acks get
// their share of it: 7–21 ms.
//
// A start gives its place back when it hands its prompt to the agent, when it fails before that (not
// once its failure is posted: a wait on the chat's API), or after startHold, whichever comes first.
// The last is for starts that wait on the outside (a sandbox being created or resumed, an agent slow
// to answer its health check): they then hold nothing the others need, as the Go scheduler hands a
// processor on when its goroutine blocks in a system call. So a start waits at most startHold for
// each start ahead of it in the gate, divided by the places: 50 starts that each wait seconds on a
// provider, on 2 places, begin their last one 2.5 s late. (On PostgreSQL the lock pool bounds the
// turns that can wait here to about 32.)
//
// The price is throughput where a start's own waits are short but many (a commit's flush, a round
// trip to the database): fewer starts overlap them. BenchmarkPoolScale's 100,000 first turns on
// SQLite and the in-memory provider went from 430 to about 365 a second. The acks are worth it: every
// message's ack waited behind the starts, while a start held back delays only its own answer, which
// is seconds away anyway.
type startGate struct {
	slots chan struct{}
	hold  time.Duration
	// onWait, if set (tests), is called when a start finds no place free and waits.
	onWait func()
}

// startHold bounds how long one start keeps its place in the gate (see above). A start on a warm
// sandbox is a few milliseconds of work, tens when the CPUs are busy (which is when the gate
// matters: at 20 ms, starts under a burst let their places go before they were done, and the gate
// did nothing); one that takes longer is waiting on something else.
const startHold = 100 * time.Millisecond

func newStartGate(n int, hold time.Duration) *startGate {
	return &startGate{slots: make(chan struct{}, max(1, n)), hold: hold}
}

// startPass is one start's place in the gate. Its done gives the place back; it may be called any
// number of times, and is a no-op on a nil pass (no place was taken).
type startPass struct {
	once  sync.Once
	slots chan struct{}
	timer *time.Timer
}

// enter waits for a place, and returns it. When ctx ends first (the turn was cancelled) it returns a
// nil pass: the start goes on without one and meets the cancel at its next step, where it ends as
// it would have.
func (g *startGate) enter(ctx context.Context) *startPass {
	select {
	case g.slots <- struct{}{}:
	default:
		if g.onWait != nil {
			g.onWait()
		}
		select {
		case g.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
	}
	s := &startPass{slots: g.slots}
	s.timer = time.AfterFunc(g.hold, s.release)
	return s
}

// done gives the place back. It is called by the start's own goroutine, after enter.
func (s *startPass) done() {
	if s == nil {
		return
	}
	s.timer.Stop()
	s.release()
}

// release gives the place back once: from done, or from the timer at startHold.
func (s *startPass) release() { s.once.Do(func() { <-s.slots }) }
