package agentpool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/threadbox/threadbox/db"
)

// onThread runs f on the thread's queue, after the turns queued before it, holding the thread's
// store lock: admin actions never race a turn, in this process or another.
//
// Called from a job already on that thread's queue (an admin command written in the thread it names,
// through Do), it runs f at once: queueing behind itself would wait forever.
func (p *Pool) onThread(ctx context.Context, threadKey string, f func(ctx context.Context, cur db.Session) error) error {
	done := make(chan error, 1)
	job := func(qctx context.Context) {
		// The job runs under the caller's deadline, but a pool shutdown cancels it too.
		jctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(qctx, cancel)
		defer stop()
		unlock, err := p.store.LockThread(jctx, threadKey)
		if err != nil {
			done <- fmt.Errorf("lock thread %s: %w", threadKey, err)
			return
		}
		defer unlock()
		cur, err := p.store.SessionGet(jctx, threadKey)
		if err != nil {
			done <- fmt.Errorf("session %s: %w", threadKey, err)
			return
		}
		done <- f(jctx, cur)
	}
	if runningOn(ctx, threadKey) {
		job(ctx)
		return <-done
	}
	_, err := p.q.add(threadKey, 0, job, func(reason error) { done <- reason })
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reset destroys the thread's sandbox and forgets its agent session and hand-off note, so the next
// message starts fresh: no history is replayed into the new sandbox. The turns stay in the database
// as the record.
func (p *Pool) Reset(ctx context.Context, threadKey string) error {
	// Queued turns would only run in a sandbox about to be destroyed: drop them, stop the running one.
	p.q.clear(threadKey, ErrReset)
	err := p.onThread(ctx, threadKey, func(ctx context.Context, cur db.Session) error {
		if _, err := p.life.destroy(ctx, cur); err != nil {
			return err
		}
		// The replay starts after the newest finished turn: a reset thread starts fresh.
		last, err := p.store.TurnTranscript(ctx, threadKey, db.TranscriptLimit{MaxTurns: 1, MaxChars: 1 << 30})
		if err != nil {
			return err
		}
		mark := cur.ResetTurnID
		if len(last) > 0 {
			mark = last[len(last)-1].ID
		}
		none := ""
		_, err = p.store.SessionUpdate(ctx, threadKey, db.SessionPatch{AgentSessionID: &none, HandoffNote: &none, ResetTurnID: &mark})
		return err
	})
	if errors.Is(err, db.ErrNotFound) {
		return nil // nothing to reset
	}
	return err
}

// Destroy destroys the thread's sandbox; its history is kept and replayed into the next one. A
// sandbox already gone is success.
func (p *Pool) Destroy(ctx context.Context, threadKey string) error {
	return p.onThread(ctx, threadKey, func(ctx context.Context, cur db.Session) error {
		_, err := p.life.destroy(ctx, cur)
		return err
	})
}

// Pause stops the thread's sandbox now, keeping its files (what the idle loop does after the
// timeout). A sandbox found gone leaves the session destroyed: the next message recreates it.
func (p *Pool) Pause(ctx context.Context, threadKey string) error {
	return p.onThread(ctx, threadKey, func(ctx context.Context, cur db.Session) error {
		_, err := p.life.pause(ctx, cur)
		return err
	})
}

// Resume starts the thread's sandbox again (or recreates it if it is gone) without running a turn.
func (p *Pool) Resume(ctx context.Context, threadKey string) error {
	return p.onThread(ctx, threadKey, func(ctx context.Context, cur db.Session) error {
		r, err := p.life.resolve(ctx, cur, nil)
		if err != nil {
			return err
		}
		health, err := p.ensureRuntime(ctx, r, 0)
		if err != nil {
			return err
		}
		_, err = p.life.record(ctx, r.sess, health, nil)
		return err
	})
}

// Ops implements the admin operations (bot.AdminOps) over a pool and its maintenance loops.
type Ops struct {
	Pool  *Pool
	Maint *Maintainer
}

// Pause implements bot.AdminOps.
func (o Ops) Pause(ctx context.Context, k string) error { return o.Pool.Pause(ctx, k) }

// Resume implements bot.AdminOps.
func (o Ops) Resume(ctx context.Context, k string) error { return o.Pool.Resume(ctx, k) }

// Destroy implements bot.AdminOps.
func (o Ops) Destroy(ctx context.Context, k string) error { return o.Pool.Destroy(ctx, k) }

// MoveProvider implements bot.ProviderMover (admin move).
func (o Ops) MoveProvider(ctx context.Context, k, provider string) (ProviderChange, error) {
	return o.Pool.MoveProvider(ctx, k, provider)
}

// Depth implements bot.AdminOps.
func (o Ops) Depth(k string) int { return o.Pool.Depth(k) }

// Drain implements bot.AdminOps: no new turns; wait for the queued and running ones.
//
// An "admin drain" written in a chat thread runs on that thread's queue, which stays busy until
// Drain returns: waiting for every queue would wait for itself for ever. Such a drain waits for the
// other threads only (the jobs queued behind it in its own thread run after it, as drained work
// does).
func (o Ops) Drain(ctx context.Context) error {
	q := o.Pool.q
	q.close(true, ErrClosed)
	if _, onQueue := ctx.Value(onQueueKey{}).(string); !onQueue {
		return q.wait(ctx)
	}
	// The queue signals only when no key is busy, which cannot happen while this job runs: poll.
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		q.mu.Lock()
		others := q.busy - 1
		q.mu.Unlock()
		if others <= 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drainPoll is how often a drain run from a thread's queue looks whether the other threads are done.
const drainPoll = 100 * time.Millisecond

// Reap implements bot.AdminOps.
func (o Ops) Reap(ctx context.Context, dryRun bool) (string, error) {
	if o.Maint == nil {
		return "", errors.New("the reaper is not running in this process")
	}
	rep, err := o.Maint.ReapPass(ctx, dryRun)
	if err != nil {
		return "", err
	}
	verb, volVerb := "destroyed", "removed"
	if dryRun {
		verb, volVerb = "would destroy", "would remove"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Reaper %s %d orphaned sandbox(es)", verb, len(rep.Orphans))
	for _, o := range rep.Orphans {
		fmt.Fprintf(&b, "\n  %s (thread %q, created %s)", o.Handle.ID, o.Labels["threadbox.thread"], o.CreatedAt.Format("2006-01-02 15:04"))
	}
	if len(rep.OrphanVolumes) > 0 {
		fmt.Fprintf(&b, "\nand %s %d orphaned volume(s)", volVerb, len(rep.OrphanVolumes))
		for _, v := range rep.OrphanVolumes {
			fmt.Fprintf(&b, "\n  %s (thread %q, created %s)", v.Name, v.Labels["threadbox.thread"], v.CreatedAt.Format("2006-01-02 15:04"))
		}
	}
	if len(rep.ListFailed) > 0 {
		fmt.Fprintf(&b, "\nnot reaped this time, the provider could not be listed: %s", strings.Join(rep.ListFailed, ", "))
	}
	return b.String(), nil
}

// Stats implements bot.AdminOps.
func (o Ops) Stats(ctx context.Context) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Threads with turns running or queued: %d\n", o.Pool.Busy())
	for _, st := range []db.SessionStatus{db.SessionActive, db.SessionPaused, db.SessionError, db.SessionCreating} {
		ss, err := o.Pool.store.SessionsByStatus(ctx, st, "", db.MaxBatch)
		if err != nil {
			return "", err
		}
		n := fmt.Sprint(len(ss))
		if len(ss) == db.MaxBatch {
			n += "+"
		}
		fmt.Fprintf(&b, "Sessions %s: %s\n", st, n)
	}
	fmt.Fprintf(&b, "Provider: %s", o.Pool.DefaultProvider())
	if ps := o.Pool.Providers(); len(ps) > 1 {
		fmt.Fprintf(&b, " (the default; enabled: %s)", strings.Join(ps, ", "))
	}
	fmt.Fprintf(&b, ", runtime: %s", o.Pool.DefaultRuntime())
	if rs := o.Pool.Runtimes(); len(rs) > 1 {
		fmt.Fprintf(&b, " (the default; enabled: %s)", strings.Join(rs, ", "))
	}
	return b.String(), nil
}
