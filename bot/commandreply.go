package bot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// Durable command replies.
//
// Acknowledged means answered, for commands as for turns. A command (help, status, stop, reset, use,
// admin …) is recorded before Handle returns, so before the ack; its answer is recorded once known,
// then posted, and the record deleted. A process that dies in between leaves the record, and the
// next recovery pass of a live process (RecoverCommands, from the pool's RecoverPass) answers it:
// with the recorded answer, or, when the command had not answered, by saying it was interrupted and
// may not have happened. A command is never run again on its own: reset, stop, use and admin
// commands have effects, and by the time a pass finds it the thread may have moved on.
//
// When the record cannot be written (the database is down) the command still runs, as before
// durable replies: stop and status are what users reach for in an outage, and refusing them until
// the database is back would be worse than the small window a crash would then lose.

// commandRecords is the durable side of command replies: the store, this process's instance (the
// records' owner), and the commands this process is answering now, by event id. A command is held
// from before its record is inserted until it is answered (or dropped), so a recovery pass that reads
// the record in between, before its id is even known, never takes a live command for an orphan.
type commandRecords struct {
	store db.CommandStore
	owner string

	mu       sync.Mutex     // protects inflight
	inflight map[string]int // event id → commands of it being answered (a redelivery may overlap)
}

// maxCommandPosts is how many failed posts of a recorded reply are tried before it is given up.
const maxCommandPosts = 3

// InterruptedCommandText is the reply to a command whose process died before it answered.
func InterruptedCommandText(name string) string {
	return fmt.Sprintf("I restarted before I could answer your `%s`, so it may not have happened. Send `status` to check, and send it again if it is still needed.", name)
}

// commandRecordsFor enables durable command replies when the store keeps commands and the pool names
// the process (both are so in serve; tests' fakes may be neither).
func commandRecordsFor(store Store, turns Turns) *commandRecords {
	cs, ok := store.(db.CommandStore)
	in, ok2 := turns.(interface{ Instance() string })
	if !ok || !ok2 || in.Instance() == "" {
		return nil
	}
	return &commandRecords{store: cs, owner: in.Instance(), inflight: map[string]int{}}
}

// commandReply is one command's reply on its way: its record (nil when not recorded) and where the
// reply goes.
type commandReply struct {
	h       *Handler
	rec     *db.Command
	r       Replier
	private string // the user the reply goes to alone ("" for the thread)
	name    string // the command, as its sender is told it
	held    string // the event id held in h.cmds.inflight ("" when none)
}

// beginCommand records msg as the command name before the ack. private names the user a private
// reply goes to. It returns false when the message was recorded before (a redelivery): it is
// answered already, or being answered.
func (h *Handler) beginCommand(ctx context.Context, msg Message, r Replier, name, private string) (*commandReply, bool) {
	cr := &commandReply{h: h, r: r, private: private, name: name}
	if h.cmds == nil {
		return cr, true
	}
	event := cmp.Or(msg.replyEvent, msg.EventID)
	cr.held = event
	h.cmds.hold(cr.held) // before the insert: a pass may read the record before it returns
	dl, err := encodeDelivery(Message{Thread: msg.Thread, ChannelID: msg.ChannelID, Reply: msg.Reply})
	if err == nil {
		var rec db.Command
		ictx, cancel := context.WithTimeout(ctx, commandRecordTimeout)
		rec, err = h.cmds.store.CommandInsert(ictx, db.NewCommand{
			PlatformEventID: event, ThreadKey: msg.Thread.String(), UserID: msg.User.ID,
			Command: name, Private: private != "", Delivery: dl, Owner: h.cmds.owner,
		})
		cancel()
		if errors.Is(err, db.ErrDuplicate) {
			h.log.Debug("command already recorded", zap.String("event", event))
			cr.release()
			return nil, false
		}
		if err == nil {
			cr.rec = &rec
			return cr, true
		}
	}
	h.log.Warn("command not recorded; answering it all the same", zap.String("command", name),
		zap.String("thread", msg.Thread.String()), zap.Error(err))
	return cr, true
}

// abandon forgets the record of a command that was not taken after all (Handle refuses the message,
// so the platform delivers it again, and that delivery must not be a duplicate).
func (cr *commandReply) abandon(ctx context.Context) {
	cr.release()
	if cr.rec != nil {
		cr.h.cmds.forget(ctx, cr.h.log, cr.rec.ID)
	}
}

// release lets recovery passes see the command's record again (once: later calls do nothing).
func (cr *commandReply) release() {
	if cr.held != "" {
		cr.h.cmds.release(cr.held)
		cr.held = ""
	}
}

// dropped answers a command whose queued job was dropped before it ran. A reset of the thread is
// answered now: the command did not run, and its sender is told why (not, a loop interval later, that
// a restart interrupted it). At shutdown the record is left, as a queued turn is, for the next process
// to answer as interrupted.
func (cr *commandReply) dropped(ctx context.Context, reason error) {
	if errors.Is(reason, agentpool.ErrClosed) {
		cr.release()
		return
	}
	h := cr.h
	text := DroppedCommandText(cr.name, errors.Is(reason, agentpool.ErrReset))
	ctx = context.WithoutCancel(ctx)
	h.bg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, commandTimeout)
		defer cancel()
		cr.finish(ctx, text)
	})
}

// DroppedCommandText is the reply to a command whose queued job was dropped before it ran; reset says
// a reset of the thread dropped it.
func DroppedCommandText(name string, reset bool) string {
	why := "it was taken off this thread's queue before its turn came."
	if reset {
		why = "this thread was reset before its turn came."
	}
	return fmt.Sprintf("Your `%s` did not run: %s Send it again if it is still needed.", name, why)
}

// finish records text as the answer, posts it, and forgets the record. A failed post leaves the
// record for the recovery pass, which tries again.
func (cr *commandReply) finish(ctx context.Context, text string) {
	h := cr.h
	defer cr.release()
	if cr.rec != nil {
		if err := h.cmds.store.CommandAnswer(ctx, cr.rec.ID, text); err != nil {
			h.log.Warn("recording a command's answer", zap.Int64("command", cr.rec.ID), zap.Error(err))
		}
	}
	err := postCommandReply(ctx, cr.r, cr.private, text, true)
	if err != nil {
		h.log.Warn("posting a command reply", zap.Error(err))
		if cr.rec != nil {
			h.cmds.failed(ctx, h.log, *cr.rec)
		}
		return
	}
	if cr.rec != nil {
		h.cmds.forget(ctx, h.log, cr.rec.ID)
	}
}

// postCommandReply posts text to the thread, or to user alone when user is set. secret says text
// may not fall back to the thread where the platform has no private replies.
func postCommandReply(ctx context.Context, r Replier, user, text string, secret bool) error {
	if user == "" {
		return r.Post(ctx, text)
	}
	pp, ok := r.(PrivatePoster)
	if !ok {
		return r.Post(ctx, text)
	}
	err := pp.PostPrivate(ctx, user, text) // never falls back to the shared thread with a secret
	if errors.Is(err, ErrNoPrivate) {
		if secret {
			return r.Post(ctx, NoPrivateAdminText)
		}
		return r.Post(ctx, text)
	}
	return err
}

func (c *commandRecords) hold(event string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight[event]++
}

func (c *commandRecords) release(event string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[event]--; c.inflight[event] <= 0 {
		delete(c.inflight, event)
	}
}

func (c *commandRecords) answering(event string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight[event] > 0
}

func (c *commandRecords) forget(ctx context.Context, log *zap.Logger, id int64) {
	ctx, cancel := settle(ctx)
	defer cancel()
	if err := c.store.CommandDelete(ctx, id); err != nil {
		// Left behind, it is posted a second time by a recovery pass: said twice, not lost.
		log.Warn("forgetting an answered command", zap.Int64("command", id), zap.Error(err))
	}
}

// failed counts a failed post; the last allowed one gives the record up.
func (c *commandRecords) failed(ctx context.Context, log *zap.Logger, rec db.Command) {
	ctx, cancel := settle(ctx)
	defer cancel()
	n, err := c.store.CommandPostFailed(ctx, rec.ID)
	if err != nil {
		log.Warn("counting a failed command reply", zap.Int64("command", rec.ID), zap.Error(err))
		return
	}
	if n >= maxCommandPosts {
		log.Warn("giving up a command reply that could not be posted", zap.Int64("command", rec.ID),
			zap.String("thread", rec.ThreadKey), zap.String("command_name", rec.Command), zap.Int("attempts", n))
		c.forget(ctx, log, rec.ID)
	}
}

// settle is a short context of its own for the bookkeeping after a post: the command's may be
// nearly spent.
func settle(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), commandSettleTimeout)
}

// commandRecordTimeout bounds a command's record before the ack. A database that hangs (rather than
// refuses) would otherwise hold the command, stop included, for as long as the adapter's context
// lives; past it the command runs unrecorded, as when the database is down. Under Slack's 3 s ack.
const commandRecordTimeout = 2 * time.Second

// commandSettleTimeout bounds one write of a command record's bookkeeping.
const commandSettleTimeout = 10 * time.Second

// RecoverCommands answers the recorded commands that no live process is answering: those of dead
// processes (claimed first, so two passes never both answer one), and this process's own whose post
// failed. isAlive reports whether a process instance lives. It returns how many it answered.
func (h *Handler) RecoverCommands(ctx context.Context, isAlive func(owner string) (bool, error)) (int, error) {
	if h.cmds == nil {
		return 0, nil
	}
	var after int64
	answered := 0
	for {
		page, err := h.cmds.store.CommandsOpen(ctx, after, db.DefaultBatch)
		if err != nil {
			return answered, fmt.Errorf("recover commands: %w", err)
		}
		for _, c := range page {
			after = c.ID
			ok, err := h.recoverCommand(ctx, c, isAlive)
			if err != nil {
				if ctx.Err() != nil {
					return answered, ctx.Err()
				}
				h.log.Warn("recovering a command reply", zap.Int64("command", c.ID), zap.String("thread", c.ThreadKey), zap.Error(err))
			}
			if ok {
				answered++
			}
		}
		if len(page) < db.DefaultBatch {
			return answered, nil
		}
	}
}

func (h *Handler) recoverCommand(ctx context.Context, c db.Command, isAlive func(string) (bool, error)) (bool, error) {
	if c.Owner == h.cmds.owner {
		if h.cmds.answering(c.PlatformEventID) {
			return false, nil
		}
	} else if c.Attempts == 0 {
		// A live owner may be answering it now. One whose post failed is done with it (and, as a
		// follower, runs no pass to try again): taken over below like a dead owner's.
		live, err := isAlive(c.Owner)
		if err != nil || live {
			return false, err
		}
	}
	if c.Owner != h.cmds.owner {
		var err error
		if c, err = h.cmds.store.CommandClaim(ctx, c.ID, c.Owner, h.cmds.owner); errors.Is(err, db.ErrConflict) {
			return false, nil // another pass took it
		} else if err != nil {
			return false, err
		}
	}
	_, _, r, err := h.restoreDelivery(c.Delivery)
	if err != nil {
		h.cmds.forget(ctx, h.log, c.ID) // nowhere to post it: never try for ever
		return false, err
	}
	text, secret := InterruptedCommandText(c.Command), false
	if c.Answer != nil {
		text, secret = *c.Answer, true
	}
	private := ""
	if c.Private {
		private = c.UserID
	}
	pctx, cancel := context.WithTimeout(ctx, commandTimeout)
	err = postCommandReply(pctx, r, private, text, secret)
	cancel()
	if err != nil {
		h.cmds.failed(ctx, h.log, c)
		return false, err
	}
	h.log.Info("answered a command whose process died before posting its reply", zap.Int64("command", c.ID),
		zap.String("thread", c.ThreadKey), zap.String("command_name", c.Command), zap.Bool("had_answer", c.Answer != nil))
	h.cmds.forget(ctx, h.log, c.ID)
	return true, nil
}
