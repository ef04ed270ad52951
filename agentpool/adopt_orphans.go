package agentpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
)

// Turn ends that were posted but not recorded (see adopt.go for the whole design).
//
// endTurn records a turn's end, then posts it. When the record fails for its whole retry window (the
// database is down), the reply is posted all the same, and the row stays running, owned by this live
// process, which no longer holds it anywhere. Nobody answers such a row while this process lives;
// once it has gone, recovery would answer it "interrupted": a second reply. So endTurn remembers the
// end it could not record (unrecorded, in ownTurns), and each adoption pass writes it again,
// silently: its reply is out already.

// maxUnrecorded bounds the ends kept in memory. An outage long enough to fill it loses the oldest:
// the turn is then answered as interrupted (adopt.go), a second reply, but never an unanswered one.
const maxUnrecorded = 1000

// unrecordedEnd is a turn end that was posted (or tried) but could not be recorded.
type unrecordedEnd struct {
	result db.TurnResult
	// settled: the post is done with (reached the chat, or failed for good), so the turn is marked
	// delivered with its end. Otherwise (ErrNotPosted) it is left undelivered for repostPass.
	settled bool
}

// rememberUnrecorded keeps turnID's end for the adoption pass, dropping the oldest when full.
func (p *Pool) rememberUnrecorded(turnID int64, e unrecordedEnd) {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.own.unrecorded == nil {
		p.own.unrecorded = map[int64]unrecordedEnd{}
	}
	if _, ok := p.own.unrecorded[turnID]; !ok && len(p.own.unrecorded) >= maxUnrecorded {
		oldest := turnID
		for id := range p.own.unrecorded {
			oldest = min(oldest, id)
		}
		delete(p.own.unrecorded, oldest)
		p.log.Error("too many turn ends could not be recorded; forgetting the oldest (it will be answered as interrupted)",
			zap.Int64("turn", oldest), zap.Int("kept", maxUnrecorded))
	}
	p.own.unrecorded[turnID] = e
}

// unrecordedEnds is a copy of the remembered ends.
func (p *Pool) unrecordedEnds() map[int64]unrecordedEnd {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	ends := make(map[int64]unrecordedEnd, len(p.own.unrecorded))
	for id, e := range p.own.unrecorded {
		ends[id] = e
	}
	return ends
}

func (p *Pool) forgetUnrecorded(turnID int64) {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	delete(p.own.unrecorded, turnID)
}

func (p *Pool) isUnrecorded(turnID int64) bool {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	_, ok := p.own.unrecorded[turnID]
	return ok
}

// recordEndsPass writes the remembered ends, one try each: the pass recurs.
func (p *Pool) recordEndsPass(ctx context.Context, rep *AdoptReport) error {
	for id, e := range p.unrecordedEnds() {
		if err := p.recordEnd(ctx, id, e); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p.log.Debug("recording a turn's end again; will retry", zap.Int64("turn", id), zap.Error(err))
			continue
		}
		rep.Recorded++
	}
	return nil
}

// recordEnd writes one remembered end, and forgets it once written (or no longer this process's).
func (p *Pool) recordEnd(ctx context.Context, id int64, e unrecordedEnd) error {
	_, err := p.store.TurnFinish(ctx, id, e.result)
	switch {
	case errors.Is(err, db.ErrNotOwner), errors.Is(err, db.ErrNotFound):
		// Claimed by another process (this one looked dead) or gone: not this process's to write.
		p.forgetUnrecorded(id)
		p.log.Warn("a turn whose end could not be recorded is no longer this process's", zap.Int64("turn", id), zap.Error(err))
		return nil
	case err != nil && !errors.Is(err, db.ErrConflict):
		return err
	}
	// Written, or ended already (an earlier try committed unseen, or the leader's watchdog ended
	// it): either way its user has had this process's reply, which must stay the only one.
	if e.settled {
		if err := p.store.TurnMarkDelivered(ctx, id); err != nil {
			return err // the next pass: its finish then conflicts, and the mark is tried again
		}
	}
	p.forgetUnrecorded(id)
	if err == nil {
		p.log.Info("recorded the end of a turn whose reply was posted while the store was down", zap.Int64("turn", id))
	}
	return nil
}

// interruptOrphansPass answers as interrupted this process's running turns started before cutoff
// that nothing here holds (see adopt.go). They are never run: they may have reached the agent.
func (p *Pool) interruptOrphansPass(ctx context.Context, cutoff time.Time, rep *AdoptReport) error {
	var after int64
	for {
		page, err := p.store.TurnsRunningOwned(ctx, p.instance, cutoff, after, db.DefaultBatch)
		if err != nil {
			return fmt.Errorf("adopt: %w", err)
		}
		for _, t := range page {
			after = t.ID
			if err := p.interruptOrphan(ctx, t, rep); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				p.log.Warn("answering a running turn of this process that nothing here runs", zap.Int64("turn", t.ID),
					zap.String("thread", t.ThreadKey), zap.Error(err))
			}
		}
		if len(page) < db.DefaultBatch {
			return nil
		}
	}
}

// reserveOrphan is reserveTurn (exclusive) that also refuses a turn whose end is remembered here.
func (p *Pool) reserveOrphan(turnID int64, eventID string) bool {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if _, ok := p.own.unrecorded[turnID]; ok {
		return false
	}
	if _, held := p.own.turns[turnID]; held || p.own.intake[eventID] > 0 {
		return false
	}
	if p.own.turns == nil {
		p.own.turns = map[int64]struct{}{}
	}
	p.own.turns[turnID] = struct{}{}
	return true
}

// interruptOrphan answers one of interruptOrphansPass's turns, as recovery answers a dead process's
// (recoverInterrupted): under the thread's lock (a runner here holds it), claimed with the usual
// compare-and-set (still ours, still running: the listing may be stale), finished as interrupted,
// then told on its thread's queue. The reservation is held until the post has ended.
func (p *Pool) interruptOrphan(ctx context.Context, t db.Turn, rep *AdoptReport) error {
	if !p.reserveOrphan(t.ID, t.PlatformEventID) {
		return nil // run, being recorded, or ended here: it is answered
	}
	reserved := true
	defer func() {
		if reserved {
			p.releaseTurn(t.ID)
		}
	}()
	unlock, done, err := p.interruptRunning(ctx, t, p.instance)
	if !done {
		return err
	}
	defer unlock()
	rep.Interrupted++
	p.log.Warn("answered as interrupted a running turn of this process that nothing here ran (its intake or start failed after recording it)",
		zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey))
	req, err := p.restoreRequest(ctx, t)
	if err != nil {
		rep.Failed++
		p.markDelivered(ctx, t.ID) // nowhere to post it
		return err
	}
	discardFiles(req.Files)
	release := func() { p.releaseTurn(t.ID) }
	err = p.Do(t.ThreadKey, func(context.Context) {
		defer release()
		p.postTakenOver(t.ThreadKey, req.Sink, Outcome{TurnID: t.ID, Err: ErrInterrupted}, p.now(), "telling a user their turn was interrupted")
	}, func(error) { release() })
	reserved = err != nil // not queued (closing): released here; the row is failed, undelivered, and
	// the next pass or process posts it (repostPass, recovery)
	return err
}
