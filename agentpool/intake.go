package agentpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
)

// Starting a turn at its intake.
//
// A turn's way from message to prompt had two commits that wait for the disk: the intake
// (TurnInsert, before the ack) and the start (TurnStartFirst, under the thread's lock). For a
// message to a thread with nothing queued or running here, the common case (a user writes, reads
// the answer, writes again), they are one: the thread's queue is taken first, so nothing can
// overtake the turn; a sandbox slot is granted if one is free now; and one statement on a lock
// connection takes the thread's lock and records the turn running (db: TurnInsertHeld). The ack
// waits for that commit as it waited for the insert, and the prompt no longer waits for a second.
//
// A turn recorded running is one its process may have handed to the agent: after a crash it gets
// the "interrupted" reply and retry, never a second run on its own. Started at intake, it only
// waits for its place in the start gate (startgate.go: bounded, 100 ms per start ahead of it) and
// resolves its sandbox before its prompt, so a crash (or the end of the shutdown grace) in between
// costs its user a retry, not a double run. Where anything is not so (the thread busy here, no slot free now, no lock connection
// idle, the lock held elsewhere, another process's turn unfinished in the thread, a store without
// TurnInsertHeld) the turn is recorded queued and starts the usual way.

// heldIntake is a store that records a turn and starts it under its thread's lock in one commit
// (PostgreSQL: db.pgStore.TurnInsertHeld). It returns a nil hold for a turn it recorded queued.
type heldIntake interface {
	TurnInsertHeld(ctx context.Context, t db.NewTurn) (db.Turn, db.Hold, error)
}

// intakeTimeout bounds recording a turn at intake; the ack waits for it (as for db's group commit).
const intakeTimeout = 30 * time.Second

// newTurn is the row a request records.
func (p *Pool) newTurn(req Request) db.NewTurn {
	return db.NewTurn{
		ThreadKey: req.ThreadKey, PlatformEventID: req.EventID, UserID: req.UserID, Prompt: req.Text,
		Delivery: req.Delivery, Owner: p.instance,
	}
}

// intakeRecord is what recording a turn at intake came to.
type intakeRecord struct {
	turn db.Turn
	// hold is the thread's lock, for a turn recorded running; nil for one recorded queued.
	hold db.Hold
	// release gives back the sandbox slot granted for a started turn.
	release func()
	// startErr, for a turn recorded running whose lock could not be had again (its statement
	// failed after the commit), is why: the turn is answered with it.
	startErr error
	// err: nothing recorded (or not known to be), the message is not taken.
	err error
}

// startAtIntake records req's turn on its thread's queue when the thread is idle here, started when
// it can be (see above), filling place, and reports taken false, having done nothing, when the thread
// is not idle or the store cannot: Submit then records it the usual way.
func (p *Pool) startAtIntake(ctx context.Context, place *slot, req Request) (tk Ticket, err error, taken bool) {
	if p.held == nil {
		return Ticket{}, nil, false
	}
	queuedAt := p.now()
	req.Sink = p.guardSink(req.Sink)
	rec := make(chan intakeRecord, 1)
	// The record is the caller's and is awaited as a whole, as a group commit's is: a message whose
	// row may commit is not given up half way because its sender left.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.intakeTimeout)
	defer cancel()
	p.met.TurnQueued(1)
	j, added, err := p.q.addIfIdle(place, req.ThreadKey,
		func(jctx context.Context) { p.recordAndRun(jctx, rctx, req, rec, queuedAt) },
		func(reason error) {
			p.met.TurnQueued(-1)
			rec <- intakeRecord{err: reason} // dropped before it ran: nothing recorded
		})
	switch {
	case err != nil:
		p.met.TurnQueued(-1)
		return Ticket{}, err, true
	case !added:
		p.met.TurnQueued(-1)
		return Ticket{}, nil, false
	}
	r := <-rec
	if r.err != nil {
		if errors.Is(r.err, db.ErrDuplicate) {
			if tk, ok := p.adoptRedelivered(ctx, req); ok {
				return tk, nil, true
			}
		}
		return Ticket{}, fmt.Errorf("agentpool: submit: %w", r.err), true
	}
	p.q.setID(j, r.turn.ID)
	return Ticket{TurnID: r.turn.ID}, nil, true
}

// recordAndRun is startAtIntake's job, first on its thread's queue: it records the turn, tells
// Submit, and runs it.
func (p *Pool) recordAndRun(ctx, rctx context.Context, req Request, rec chan<- intakeRecord, queuedAt time.Time) {
	sent := false
	defer func() {
		if sent {
			return
		}
		if v := recover(); v != nil {
			// Submit waits for the record, and the sender's ack with it: tell it, then let the
			// queue log the panic as for any job.
			p.met.TurnQueued(-1)
			rec <- intakeRecord{err: fmt.Errorf("recording the turn: panic: %v", v)}
			panic(v)
		}
	}()
	r := p.recordAtIntake(rctx, ctx, req)
	sent = true
	if r.err != nil {
		p.met.TurnQueued(-1)
		rec <- r
		return
	}
	id := r.turn.ID
	// Held from before Submit returns (its intake mark ends then) until the run ends, so that
	// AdoptPass never queues it a second time.
	p.reserveTurn(id, req.EventID, false)
	defer p.releaseTurn(id)
	rec <- r
	p.met.TurnQueued(-1)
	switch {
	case r.hold != nil:
		defer r.release()
		start := p.now()
		p.met.TurnStarted(start.Sub(queuedAt))
		p.runLocked(ctx, req, id, start, r.hold, true)
	case r.startErr != nil:
		start := p.now()
		p.met.TurnStarted(start.Sub(queuedAt))
		p.endTurn(req, id, Outcome{TurnID: id, Err: classify(EINTERNAL, "start turn", r.startErr)}, start)
	default:
		p.runTurn(ctx, req, id, queuedAt)
	}
}

// recordAtIntake records req's turn: started, with its lock and a sandbox slot, when a slot is free
// now; otherwise queued. It records it queued too when job, the context of the job recording it,
// is already cut (stop, reset, the end of the shutdown grace): the turn then ends the usual way
// (runTurn), left queued for the next process at shutdown, rather than recorded started, which
// would answer a turn nothing ran as interrupted.
func (p *Pool) recordAtIntake(ctx, job context.Context, req Request) intakeRecord {
	release, ok := p.tryAdmit(ctx, req.ThreadKey)
	if ok && job.Err() != nil {
		release()
		ok = false
	}
	if !ok {
		t, err := p.store.TurnInsert(ctx, p.newTurn(req))
		return intakeRecord{turn: t, err: err}
	}
	defer func() {
		// A panic recording it (recordAndRun refuses the message) must not keep the slot granted
		// for it: the thread would count as live for good, and at max_active others would wait.
		if v := recover(); v != nil {
			release()
			panic(v)
		}
	}()
	r := intakeRecord{release: release}
	r.turn, r.hold, r.err = p.held.TurnInsertHeld(ctx, p.newTurn(req))
	if r.err != nil && !errors.Is(r.err, db.ErrDuplicate) && !errors.Is(r.err, db.ErrInvalid) {
		r = p.recordedAfterAll(ctx, req, r.err)
		r.release = release
	}
	if r.hold == nil {
		// Recorded queued (or not at all): runTurn admits it again when it runs.
		release()
		r.release = nil
	}
	return r
}

// afterAllTimeout bounds recordedAfterAll; the ack waits for it.
const afterAllTimeout = 30 * time.Second

// recordedAfterAll looks up the turn whose recording failed with cause: the statement may have
// committed before its connection failed, and a recorded turn must be answered. Running (started
// at intake; the lock went with the connection), it takes the thread's lock again: nothing has
// run it. Not found, or not known, the message is refused with cause; a turn recorded all the same
// is then this process's orphan: adoption answers a queued one; a running one is answered only by
// the leader's watchdog (this process leading) or by recovery once this process has gone.
//
// It runs on a context of its own, retrying the lookup: the failure may be the intake's deadline
// (ctx is then done), or a connection that just failed, and a refused message whose turn was
// recorded started is answered by no one while this process lives (its redelivery is a duplicate).
func (p *Pool) recordedAfterAll(ctx context.Context, req Request, cause error) intakeRecord {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterAllTimeout)
	defer cancel()
	var t db.Turn
	err := p.retryWrite(ctx, func(ctx context.Context) error {
		var err error
		t, err = p.store.TurnGetByEvent(ctx, req.EventID)
		return err
	})
	switch {
	case err != nil:
		return intakeRecord{err: cause}
	case t.Owner != p.instance || t.ThreadKey != req.ThreadKey:
		return intakeRecord{err: cause}
	case t.Status == db.TurnQueued:
		return intakeRecord{turn: t}
	case t.Status != db.TurnRunning:
		return intakeRecord{err: cause}
	}
	p.log.Info("a turn's intake failed after recording it started; taking its thread's lock again",
		zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey), zap.Error(cause))
	hold, err := p.store.HoldThread(ctx, t.ThreadKey)
	if err != nil {
		return intakeRecord{turn: t, startErr: err}
	}
	return intakeRecord{turn: t, hold: hold}
}
