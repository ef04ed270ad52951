package agentpool

import (
	"context"
	"errors"

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
