package agentpool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
)

// Acknowledged means answered (DESIGN §6). Every turn is recorded with where its reply goes and the
// process instance that owns it. When an owner dies (SIGKILL, OOM, node loss), its instance lock is
// freed, and the next recovery pass of a live process claims the turns:
//
//   - a queued turn runs, in its thread's original order;
//   - a running turn is never run again on our own (agents have side effects): it is finished as
//     interrupted and its user told how to run it again (the retry command).
//
// Claims are compare-and-set on the owner, and a running turn is claimed only under its thread's
// lock, which a live runner holds; so two processes never both answer one turn.

// ErrInterrupted is the error of a turn whose process died while it ran.
var ErrInterrupted = errors.New(InterruptedText)

// InterruptedText is the recorded error of an interrupted turn; retry looks for it.
const InterruptedText = "interrupted by a restart before it finished"

// ErrQueueFull refuses a turn when its thread already has Config.MaxQueued turns waiting.
var ErrQueueFull = errors.New("too many messages are waiting in this thread")

// DefaultMaxQueued is Config.MaxQueued's default.
const DefaultMaxQueued = 50

// recoverLockWait bounds the wait for a running turn's thread lock: a live runner holds it, and then
// the turn is not ours to take.
const recoverLockWait = 250 * time.Millisecond

func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Instance is the id this pool records as the owner of its turns.
func (p *Pool) Instance() string { return p.instance }

// holdInstance takes this process's liveness lock once (again after it was lost).
func (p *Pool) holdInstance(ctx context.Context) error {
	p.instMu.Lock()
	defer p.instMu.Unlock()
	if p.instHold != nil {
		select {
		case <-p.instHold.Lost():
			p.log.Warn("instance liveness lock was lost; taking it again", zap.String("instance", p.instance))
		default:
			return nil
		}
	}
	h, err := p.store.HoldInstance(ctx, p.instance)
	if err != nil {
		return fmt.Errorf("holding instance lock: %w", err)
	}
	p.instHold = h
	return nil
}

// releaseInstance gives the liveness lock up (at shutdown, after the turns are done).
func (p *Pool) releaseInstance() {
	p.instMu.Lock()
	h := p.instHold
	p.instHold = nil
	p.instMu.Unlock()
	if h != nil {
		h.Release()
	}
}

// RecoverReport says what a recovery pass did.
type RecoverReport struct {
	// Requeued queued turns now run here; Interrupted running turns were answered as interrupted;
	// Redelivered finished turns had their recorded outcome posted again; Failed turns could not be
	// restored (no delivery, or an unknown platform); Commands were chat commands answered for a dead
	// process (its recorded answer, or that the command was interrupted).
	Requeued, Interrupted, Redelivered, Failed, Commands int
}

// RecoverPass takes over the unfinished turns of dead processes. It runs at start and then on the
// leader's schedule; it is safe to run in several processes at once.
func (p *Pool) RecoverPass(ctx context.Context) (RecoverReport, error) {
	var rep RecoverReport
	if p.q.isClosed() {
		return rep, nil
	}
	if err := p.holdInstance(ctx); err != nil {
		return rep, err
	}
	alive := map[string]bool{p.instance: true}
	isAlive := func(owner string) (bool, error) {
		live, ok := alive[owner]
		if !ok {
			var err error
			if live, err = p.store.InstanceAlive(ctx, owner); err != nil {
				return false, fmt.Errorf("recover: %w", err)
			}
			alive[owner] = live
		}
		return live, nil
	}
	if err := p.recoverEach(ctx, p.store.TurnsPending, isAlive, &rep, p.recoverTurn, "recovering a turn"); err != nil {
		return rep, err
	}
	// Finished turns whose outcome a dead process never posted.
	if err := p.recoverEach(ctx, p.store.TurnsUndelivered, isAlive, &rep, p.recoverUndelivered, "recovering an undelivered turn"); err != nil {
		return rep, err
	}
	if p.recoverCmds != nil {
		n, err := p.recoverCmds(ctx, isAlive)
		rep.Commands += n
		if err != nil {
			return rep, fmt.Errorf("recover: %w", err)
		}
	}
	return rep, nil
}

// recoverEach pages through the turns list gives (in id order) and hands those of dead owners to
// take. A turn that cannot be recovered is logged as what and skipped, so one bad turn does
// not hold up the others; a failed listing or liveness check ends the pass.
func (p *Pool) recoverEach(ctx context.Context, list func(ctx context.Context, afterID int64, limit int) ([]db.Turn, error),
	isAlive func(owner string) (bool, error), rep *RecoverReport,
	take func(ctx context.Context, t db.Turn, rep *RecoverReport) error, what string) error {
	var after int64
	for {
		page, err := list(ctx, after, db.DefaultBatch)
		if err != nil {
			return fmt.Errorf("recover: %w", err)
		}
		for _, t := range page {
			after = t.ID
			live, err := isAlive(t.Owner)
			if err != nil {
				return err
			}
			if live {
				continue
			}
			if err := take(ctx, t, rep); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				p.log.Warn(what, zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey), zap.Error(err))
			}
		}
		if len(page) < db.DefaultBatch {
			return nil
		}
	}
}

func (p *Pool) recoverTurn(ctx context.Context, t db.Turn, rep *RecoverReport) error {
	if t.Status == db.TurnRunning {
		return p.recoverInterrupted(ctx, t, rep)
	}
	// Held from before the claim: once claimed, the turn is ours and queued, and AdoptPass would
	// otherwise queue it too.
	if !p.reserveTurn(t.ID, t.PlatformEventID, true) {
		return nil
	}
	res, _, err := p.claimAndQueue(ctx, t, t.Owner, nil, "could not be restored after a restart: ")
	switch res {
	case claimUnrestorable:
		rep.Failed++
	case claimQueued:
		rep.Requeued++
		p.log.Info("took over a queued turn", zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey), zap.String("from", t.Owner))
	}
	return err
}

// claimResult is how claimAndQueue ended.
type claimResult int

const (
	claimLost         claimResult = iota // not claimed (another was first: no error), or not queued (closing)
	claimQueued                          // claimed and queued here
	claimUnrestorable                    // claimed, but its record could not be restored: failed
)

// claimAndQueue claims the queued turn t from owner from, as the status it was seen in (the listing
// may be stale: the claim is compare-and-set), and queues it with live, or with the request restored
// from its record when live is nil. The caller has reserved t.ID (own-turn set); the reservation is
// kept when the turn is queued and released otherwise. A turn not queued because the pool is
// closing stays claimed and queued: the next process takes it over.
func (p *Pool) claimAndQueue(ctx context.Context, t db.Turn, from string, live *Request, unrestorable string) (claimResult, int, error) {
	queued := false
	defer func() {
		if !queued {
			p.releaseTurn(t.ID)
		}
	}()
	claimed, err := p.store.TurnClaim(ctx, t.ID, from, p.instance, t.Status)
	if errors.Is(err, db.ErrConflict) {
		return claimLost, 0, nil
	}
	if err != nil {
		return claimLost, 0, err
	}
	var req Request
	if live != nil {
		req = *live
	} else if req, err = p.restoreRequest(ctx, claimed); err != nil {
		p.finishQuietly(t.ID, db.TurnResult{Status: db.TurnFailed, Error: unrestorable + err.Error()})
		return claimUnrestorable, 0, err
	}
	ahead, err := p.enqueueTurn(req, t.ID)
	if err != nil {
		return claimLost, 0, err
	}
	queued = true
	return claimQueued, ahead, nil
}

// interruptRunning answers t, a running turn nothing runs (its owner, from, died; or it is this
// process's own orphan), as interrupted: under the thread's lock, claimed from from with the usual
// compare-and-set (the listing may be stale), finished. With done, the caller holds the thread's lock
// until it calls release (it queues the reply meanwhile). done false, with a nil error, means there
// was nothing to do: the thread is busy (someone runs it, maybe this very turn) or the turn moved on.
func (p *Pool) interruptRunning(ctx context.Context, t db.Turn, from string) (release func(), done bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, recoverLockWait)
	hold, err := p.store.HoldThread(lctx, t.ThreadKey)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			return nil, false, nil // the next pass looks again
		}
		return nil, false, err
	}
	if _, err := p.store.TurnClaim(ctx, t.ID, from, p.instance, db.TurnRunning); err != nil {
		hold.Release()
		if errors.Is(err, db.ErrConflict) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if err := p.finishInterrupted(ctx, t); err != nil {
		hold.Release()
		return nil, false, err
	}
	return hold.Release, true, nil
}

// recoverInterrupted finishes a turn whose runner died, and tells its user, in the thread's order.
func (p *Pool) recoverInterrupted(ctx context.Context, t db.Turn, rep *RecoverReport) error {
	release, done, err := p.interruptRunning(ctx, t, t.Owner)
	if !done {
		return err
	}
	defer release()
	rep.Interrupted++
	p.log.Info("answered an interrupted turn", zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey), zap.String("from", t.Owner))
	req, err := p.restoreRequest(ctx, t)
	if err != nil {
		rep.Failed++
		return err
	}
	// It never runs again by itself (retry submits its prompt alone), and its runner died before
	// ending it: its attachments are read by no one now.
	discardFiles(req.Files)
	return p.Do(t.ThreadKey, func(context.Context) {
		p.postTakenOver(t.ThreadKey, req.Sink, Outcome{TurnID: t.ID, Err: ErrInterrupted}, p.now(), "telling a user their turn was interrupted")
	}, nil)
}

// finishInterrupted records t, a running turn this process has just claimed from its dead owner
// t.Owner, as interrupted. The write is retried (retryWrite): once claimed, the turn is this live
// process's, so no recovery takes it again, and a lost write left it running until the leader's
// watchdog failed it as "no progress", never telling its user it was interrupted. A write that still
// fails hands the turn back to its dead owner, so the next recovery pass (or the next turn of its
// thread) takes it over again and answers it as interrupted.
func (p *Pool) finishInterrupted(ctx context.Context, t db.Turn) error {
	err := p.retryWrite(ctx, func(ctx context.Context) error {
		_, err := p.store.TurnFinish(ctx, t.ID, db.TurnResult{Status: db.TurnFailed, Error: InterruptedText, Owner: p.instance})
		return err
	})
	if errors.Is(err, db.ErrConflict) {
		// A retried write may have committed unseen the first time.
		if cur, gerr := p.store.TurnGet(ctx, t.ID); gerr == nil && cur.Owner == p.instance &&
			cur.Status == db.TurnFailed && cur.Error == InterruptedText {
			return nil
		}
	}
	if err == nil || errors.Is(err, db.ErrConflict) || errors.Is(err, db.ErrNotOwner) {
		return err // finished, or ended (or taken) by someone else: nothing to give back
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deliverTimeout)
	defer cancel()
	if _, cerr := p.store.TurnClaim(gctx, t.ID, p.instance, t.Owner, db.TurnRunning); cerr != nil {
		p.log.Warn("handing an interrupted turn back for the next recovery pass", zap.Int64("turn", t.ID), zap.Error(cerr))
	}
	return fmt.Errorf("finish interrupted turn %d: %w", t.ID, err)
}

// postTakenOver posts the outcome of a turn this process took over and records it as delivered,
// holding the thread's lock meanwhile as a turn's own run does from its finish to its delivery: a
// recovery pass elsewhere that takes this process for dead (its instance lock's connection died)
// then waits, instead of finding the turn undelivered and posting it a second time. Without the
// lock it posts anyway: at least once, never not at all.
//
// finished is when the turn ended: a reply that does not get through is left undelivered while it
// is recent (settleDelivery), to be posted again by this process's adoption pass.
func (p *Pool) postTakenOver(threadKey string, sink Sink, out Outcome, finished time.Time, what string) {
	lctx, lcancel := context.WithTimeout(context.Background(), deliverTimeout)
	hold, err := p.store.HoldThread(lctx, threadKey)
	lcancel()
	if err != nil {
		p.log.Warn("posting a taken-over turn without its thread's lock", zap.Int64("turn", out.TurnID), zap.Error(err))
	} else {
		defer hold.Release()
	}
	ctx, cancel := context.WithTimeout(context.Background(), deliverTimeout)
	defer cancel()
	// The turn was claimed when this post was queued, and it may wait there behind a long turn:
	// meanwhile another post of it may have run (recovery queued it and the adoption pass found it
	// still undelivered), or another process may have claimed it (this one looked dead). Still
	// this process's and still undelivered, it is posted; a store that cannot say posts anyway.
	if _, err := p.store.TurnClaimUndelivered(ctx, out.TurnID, p.instance, p.instance); errors.Is(err, db.ErrConflict) {
		p.log.Info("not posting a taken-over turn: posted already, or another process took it", zap.Int64("turn", out.TurnID))
		return
	}
	_, err = sink.Deliver(ctx, out)
	if err != nil {
		p.log.Warn(what, zap.Int64("turn", out.TurnID), zap.Error(err))
	}
	p.settleDelivery(ctx, out.TurnID, finished, err)
}

// takeOverThread answers, before turn turnID, the older unfinished turns of its thread that a dead
// process left, in order: the first process to hold a thread after its owner died answers them, so a
// message sent after a crash never runs ahead of those sent before it. (The recovery pass does the
// same on its schedule for threads nobody writes to.) The thread lock is held, and this is the
// thread's queue goroutine; claims are compare-and-set, so a concurrent recovery pass answers each
// turn at most once between them.
func (p *Pool) takeOverThread(ctx context.Context, threadKey string, turnID int64) {
	olds, err := p.store.TurnsPendingInThread(ctx, threadKey, turnID, p.instance, p.cfg.MaxQueued+1)
	if err != nil {
		p.log.Warn("looking for a dead process's turns in this thread", zap.String("thread", threadKey), zap.Error(err))
		return
	}
	for _, t := range olds {
		if ctx.Err() != nil {
			return
		}
		live, err := p.store.InstanceAlive(ctx, t.Owner)
		if err != nil || live {
			continue // a live owner answers its own turns
		}
		if !p.reserveTurn(t.ID, t.PlatformEventID, true) {
			continue // this process holds it already (the recovery pass queued it)
		}
		p.takeOverHeld(ctx, threadKey, t)
		p.releaseTurn(t.ID)
	}
}

// takeOverHeld answers one dead process's turn for takeOverThread; the turn is reserved.
func (p *Pool) takeOverHeld(ctx context.Context, threadKey string, t db.Turn) {
	claimed, err := p.store.TurnClaim(ctx, t.ID, t.Owner, p.instance, t.Status)
	if err != nil {
		return // another process was first, or the store failed: the recovery pass retries
	}
	req, rerr := p.restoreRequest(ctx, claimed)
	if rerr != nil {
		p.finishQuietly(t.ID, db.TurnResult{Status: db.TurnFailed, Error: "could not be restored after a restart: " + rerr.Error()})
		return
	}
	if t.Status == db.TurnRunning {
		if err := p.finishInterrupted(ctx, t); err != nil {
			return
		}
		discardFiles(req.Files) // as in recoverInterrupted
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deliverTimeout)
		_, err := req.Sink.Deliver(dctx, Outcome{TurnID: t.ID, Err: ErrInterrupted})
		p.settleDelivery(dctx, t.ID, p.now(), err)
		cancel()
		p.log.Info("answered an interrupted turn on taking over its thread", zap.Int64("turn", t.ID), zap.String("thread", threadKey), zap.String("from", t.Owner))
		return
	}
	p.log.Info("running a dead process's queued turn on taking over its thread", zap.Int64("turn", t.ID), zap.String("thread", threadKey), zap.String("from", t.Owner))
	// Taken off the dead process's queue: in flight from here, as a turn off ours (runTurn), so that
	// its finish has a start to balance.
	start := p.now()
	p.met.TurnStarted(start.Sub(t.CreatedAt))
	// No place of its own in the start gate: it runs within the start of the turn that took the
	// thread over, whose place lapses after startHold.
	p.runHeld(ctx, req, t.ID, start, nil)
}

// recoverUndelivered posts again the recorded outcome of a turn whose process died after finishing
// it and before posting it, in the thread's order.
//
// The claim is made under the thread's lock: an owner holds it from its turn's finish until the
// delivery is recorded, so an owner that only looks dead (its instance lock's connection died) and
// is posting right now is not answered over; once it lets go, the turn is recorded as delivered and
// the claim fails.
func (p *Pool) recoverUndelivered(ctx context.Context, t db.Turn, rep *RecoverReport) error {
	lctx, cancel := context.WithTimeout(ctx, recoverLockWait)
	hold, err := p.store.HoldThread(lctx, t.ThreadKey)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			return nil // someone holds the thread: maybe its owner, posting; the next pass looks again
		}
		return err
	}
	defer hold.Release()
	claimed, err := p.store.TurnClaimUndelivered(ctx, t.ID, t.Owner, p.instance)
	if errors.Is(err, db.ErrConflict) {
		return nil
	}
	if err != nil {
		return err
	}
	if restored, err := p.postRecorded(ctx, claimed, "posting a recorded outcome again", func() {}); err != nil {
		if !restored {
			rep.Failed++
		}
		return err
	}
	rep.Redelivered++
	p.log.Info("posting again the outcome of a turn whose process died while posting it",
		zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey), zap.String("from", t.Owner))
	return nil
}

// postRecorded posts again, on its thread's queue, the recorded outcome of claimed: a finished,
// undelivered turn this process has just claimed (from a dead owner, or from itself). done runs once
// the post has ended or was dropped. A turn whose request cannot be restored is recorded as
// delivered (there is nowhere to post it: never try for ever), and restored is false.
func (p *Pool) postRecorded(ctx context.Context, claimed db.Turn, what string, done func()) (restored bool, err error) {
	req, err := p.restoreRequest(ctx, claimed)
	if err != nil {
		p.markDelivered(ctx, claimed.ID)
		return false, err
	}
	// Finished: its process discarded its attachments, or died before (or while) doing so.
	discardFiles(req.Files)
	out := recordedOutcome(claimed)
	return true, p.Do(claimed.ThreadKey, func(context.Context) {
		defer done()
		p.postTakenOver(claimed.ThreadKey, req.Sink, out, claimed.FinishedAt, what)
	}, func(error) { done() })
}

// recordedOutcome is the outcome a finished turn recorded, as far as the record has it.
func recordedOutcome(t db.Turn) Outcome {
	out := Outcome{TurnID: t.ID, Answer: t.Answer, Redelivered: true}
	switch {
	case t.Status == db.TurnCancelled:
		out.Cancelled, out.Err = true, ErrCancelled
	case t.Status == db.TurnFailed && t.Error == InterruptedText:
		out.Err = ErrInterrupted
	case t.Status == db.TurnFailed:
		out.Err = classify(EINTERNAL, "recorded failure", errors.New(t.Error))
	}
	return out
}

func (p *Pool) restoreRequest(ctx context.Context, t db.Turn) (Request, error) {
	if p.restore == nil {
		return Request{}, errors.New("no restorer configured")
	}
	req, err := p.restore(ctx, t)
	if err != nil {
		return Request{}, err
	}
	if req.Sink == nil {
		req.Sink = NopSink{}
	}
	// The restored sink is the bot's code, as a submitted one is: a panic in it must cost the
	// taken-over turn its post, not unwind the job that takes it over (a new turn of the thread).
	req.Sink = p.guardSink(req.Sink)
	req.ThreadKey, req.EventID = t.ThreadKey, t.PlatformEventID
	return req, nil
}
