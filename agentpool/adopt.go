package agentpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
)

// Adoption closes the last hole in "acknowledged means answered". A PostgreSQL insert can commit
// and still report an error (the connection dies after the commit, or a timeout fires while it is
// in flight: pg_intake.go). Submit then refuses the message, the platform delivers it again, the
// redelivery is a duplicate of the recorded event and is ignored, and the recorded turn stays
// queued, owned by this live process, in none of its queues. Recovery never takes it: its owner is
// alive. So the pool also adopts its own orphans: queued turns it owns that are in no queue of
// this process and whose Submit is not under way. Such a turn never started (a start makes it
// running), so running it runs the agent once.
//
// What keeps one turn from being queued twice in this process is the pool's own-turn set (own):
// a turn is in it from its enqueue until its run or drop ends, and a Submit's event id is in
// intake from before its insert until its enqueue. Adoption checks and reserves under the same
// mutex, then claims the turn from itself with the usual compare-and-set (still ours, still
// queued), because the listing it works from may be stale: the turn may have run and finished
// since. The grace period is a second guard, for whatever records a turn as ours without going
// through Submit.
//
// Running turns are the other half. A turn recorded running, owned by this live process, that no job
// here holds (not in the own-turn set, no intake mark) is answered by nobody until the process dies:
//
//   - its intake's held statement committed it started and then failed, and the lookup
//     (recordedAfterAll) failed too: the message was refused, and its redelivery is a duplicate of a
//     running turn, which adoptRedelivered does not take (only a queued turn is known never to have
//     started);
//   - its end could not be recorded for the whole retry window (endTurn): its reply was posted, and
//     recovery would answer it a second time, as interrupted, once the process is gone.
//
// For the second, endTurn remembers the end it posted (adopt_orphans.go, bounded: maxUnrecorded) and
// each pass records it first, silently. Every other such turn started before the grace period is
// answered as interrupted (never run: it may have reached the agent), as recovery answers a dead
// process's: reserved (refused while held, being recorded, or remembered), then under the thread's
// lock (a runner here holds it) claimed from this process by compare-and-set (still ours, still
// running), finished as interrupted, and told once on its thread's queue; its user can send retry.
// The listing is the store's (TurnsRunningOwned: this owner's, started before the cutoff), not every
// pending turn.

// DefaultAdoptAfter is Config.AdoptAfter's default.
const DefaultAdoptAfter = 30 * time.Second

// ownTurns is what the pool holds in memory: turns queued or running here, and Submits under way.
type ownTurns struct {
	turns map[int64]struct{}
	// intake counts the Submits of each event id between their insert and their enqueue (two
	// deliveries of one event may race).
	intake map[string]int
	// unrecorded are the turn ends posted here that could not be recorded (adopt_orphans.go).
	unrecorded map[int64]unrecordedEnd
}

// beginIntake marks a Submit of eventID as under way; endIntake ends the mark.
func (p *Pool) beginIntake(eventID string) {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.own.intake == nil {
		p.own.intake = map[string]int{}
	}
	p.own.intake[eventID]++
}

func (p *Pool) endIntake(eventID string) {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.own.intake[eventID]--; p.own.intake[eventID] <= 0 {
		delete(p.own.intake, eventID)
	}
}

// reserveTurn adds turnID to the own-turn set. With exclusive, it refuses (false) a turn already
// held, or one whose event a Submit is recording now.
func (p *Pool) reserveTurn(turnID int64, eventID string, exclusive bool) bool {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.own.turns == nil {
		p.own.turns = map[int64]struct{}{}
	}
	if exclusive {
		if _, held := p.own.turns[turnID]; held {
			return false
		}
		if p.own.intake[eventID] > 0 {
			return false
		}
	}
	p.own.turns[turnID] = struct{}{}
	return true
}

// reserveRedelivered is reserveTurn for Submit's own duplicate: it holds eventID's intake mark
// itself, so only another Submit of the event (a second delivery racing it) refuses.
func (p *Pool) reserveRedelivered(turnID int64, eventID string) bool {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if _, held := p.own.turns[turnID]; held || p.own.intake[eventID] > 1 {
		return false
	}
	if p.own.turns == nil {
		p.own.turns = map[int64]struct{}{}
	}
	p.own.turns[turnID] = struct{}{}
	return true
}

// releaseTurn removes turnID from the own-turn set (its run or drop has ended).
func (p *Pool) releaseTurn(turnID int64) {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	delete(p.own.turns, turnID)
}

// AdoptReport says what an adoption pass did.
type AdoptReport struct {
	// Adopted turns were queued here; Failed ones could not be restored and were failed.
	Adopted, Failed int
	// Reposted turns had a reply that did not reach the chat (ErrNotPosted); it was posted again.
	Reposted int
	// Recorded turns had their end posted while it could not be recorded; it is recorded now.
	Recorded int
	// Interrupted turns were running, this process's, and held by nothing here: answered as
	// interrupted.
	Interrupted int
}

// AdoptPass queues this process's own orphaned turns (see above). It runs in every process, not
// only on the leader: no other process may take the turns of a live one.
func (p *Pool) AdoptPass(ctx context.Context) (AdoptReport, error) {
	var rep AdoptReport
	if p.q.isClosed() {
		return rep, nil
	}
	// First: a turn whose end is written here is not taken for an orphan, nor its reply posted again.
	if err := p.recordEndsPass(ctx, &rep); err != nil {
		return rep, err
	}
	cutoff := p.now().Add(-p.cfg.AdoptAfter)
	var after int64
	for {
		// Filtered by the database: this pass runs in every replica, and the pending turns of the
		// others (their prompts can be megabytes) are none of its business.
		page, err := p.store.TurnsQueuedOwned(ctx, p.instance, cutoff, after, db.DefaultBatch)
		if err != nil {
			return rep, fmt.Errorf("adopt: %w", err)
		}
		for _, t := range page {
			after = t.ID
			if err := p.adoptTurn(ctx, t, &rep); err != nil {
				if ctx.Err() != nil {
					return rep, ctx.Err()
				}
				p.log.Warn("adopting a turn of this process", zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey), zap.Error(err))
			}
		}
		if len(page) < db.DefaultBatch {
			break
		}
	}
	if err := p.interruptOrphansPass(ctx, cutoff, &rep); err != nil {
		return rep, err
	}
	return rep, p.repostPass(ctx, cutoff, &rep)
}

// repostPass posts again the replies of this process's finished turns that did not reach the chat
// (ErrNotPosted) and ended before cutoff. The ones that ended over RepostFor ago are given up.
func (p *Pool) repostPass(ctx context.Context, cutoff time.Time, rep *AdoptReport) error {
	var after int64
	for {
		page, err := p.store.TurnsUndelivered(ctx, after, db.DefaultBatch)
		if err != nil {
			return fmt.Errorf("adopt: %w", err)
		}
		for _, t := range page {
			after = t.ID
			if t.Owner != p.instance || t.FinishedAt.After(cutoff) || p.isUnrecorded(t.ID) {
				continue
			}
			if err := p.repostTurn(ctx, t, rep); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				p.log.Warn("posting a reply again", zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey), zap.Error(err))
			}
		}
		if len(page) < db.DefaultBatch {
			return nil
		}
	}
}

// repostTurn posts one of repostPass's turns on its thread's queue, after the turns queued there.
func (p *Pool) repostTurn(ctx context.Context, t db.Turn, rep *AdoptReport) error {
	if !p.reserveTurn(t.ID, t.PlatformEventID, true) {
		return nil // its run is still posting it
	}
	reserved := true
	defer func() {
		if reserved {
			p.releaseTurn(t.ID)
		}
	}()
	// The listing may be stale (its run may have posted it since): the claim checks that it is
	// still this process's and still undelivered.
	claimed, err := p.store.TurnClaimUndelivered(ctx, t.ID, p.instance, p.instance)
	if errors.Is(err, db.ErrConflict) {
		return nil
	}
	if err != nil {
		return err
	}
	if p.now().Sub(claimed.FinishedAt) >= RepostFor {
		p.log.Error("giving up posting a reply that never reached the chat", zap.Int64("turn", t.ID),
			zap.String("thread", t.ThreadKey), zap.Duration("tried_for", RepostFor))
		p.markDelivered(ctx, t.ID)
		return nil
	}
	restored, err := p.postRecorded(ctx, claimed, "posting a reply again", func() { p.releaseTurn(t.ID) })
	if err != nil {
		if !restored {
			rep.Failed++
		}
		return err // or closing: the next pass, or the next process, posts it
	}
	reserved = false
	rep.Reposted++
	p.log.Info("posting again a reply that did not reach the chat", zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey))
	return nil
}

func (p *Pool) adoptTurn(ctx context.Context, t db.Turn, rep *AdoptReport) error {
	if !p.reserveTurn(t.ID, t.PlatformEventID, true) {
		return nil // queued or running here, or being recorded: it is answered
	}
	// The listing may be stale: the turn may have run since. Still ours and still queued, it
	// never started, and the reservation keeps anyone here from queuing it meanwhile.
	res, _, err := p.claimAndQueue(ctx, t, p.instance, nil, "could not be restored: ")
	switch res {
	case claimUnrestorable:
		rep.Failed++
	case claimQueued:
		rep.Adopted++
		p.log.Info("adopted a queued turn of this process that no queue held (its intake reported a failure after recording it)",
			zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey))
	}
	return err
}

// adoptRedelivered answers Submit's duplicate at once when it is the case above: the recorded turn
// is this process's own, still queued and held nowhere here, so its intake reported a failure after
// recording it, and this is the platform delivering the refused message again. It is queued with
// req, the live request (its replier, its attachments), instead of waiting for the adoption pass.
// It reports false for every other duplicate, which stays one.
func (p *Pool) adoptRedelivered(ctx context.Context, req Request) (Ticket, bool) {
	t, err := p.store.TurnGetByEvent(ctx, req.EventID)
	// The same event in the same thread, with the same words: an event id alone is the platform's
	// (or a client's) word, and a client that reused its key for another message must not have
	// that one run under this record.
	if err != nil || t.Owner != p.instance || t.Status != db.TurnQueued || t.ThreadKey != req.ThreadKey ||
		t.Prompt != db.StorableText(req.Text) {
		return Ticket{}, false
	}
	if !p.reserveRedelivered(t.ID, req.EventID) {
		return Ticket{}, false
	}
	// As in adoptTurn: the read may be stale, the claim is not.
	res, ahead, err := p.claimAndQueue(ctx, t, p.instance, &req, "")
	if res != claimQueued {
		if err != nil {
			p.log.Warn("adopting a redelivered message", zap.Int64("turn", t.ID), zap.Error(err))
		}
		return Ticket{}, false
	}
	p.log.Info("adopted a redelivered message whose first intake reported a failure after recording it",
		zap.Int64("turn", t.ID), zap.String("thread", t.ThreadKey))
	return Ticket{TurnID: t.ID, Ahead: ahead}, true
}

// RunAdopt runs AdoptPass every interval until ctx ends.
func (p *Pool) RunAdopt(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = p.cfg.AdoptAfter // a ticker panics on a non-positive interval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if rep, err := p.AdoptPass(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("adoption pass failed; will retry", zap.Error(err))
		} else if rep.Failed > 0 {
			p.log.Warn("adoption pass could not restore some turns", zap.Int("failed", rep.Failed))
		}
	}
}
