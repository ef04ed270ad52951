package agentpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// itemOutcome is what a pass did with one candidate.
type itemOutcome int

const (
	outDone itemOutcome = iota
	outSkipped
	outFailed
)

// drainBatches fetches candidates and handles each once, until a batch comes back short or holds
// nothing new. The second condition matters: a skipped candidate (its thread was busy) stays in the
// query's result, and a full batch of those means this pass can make no more progress.
func drainBatches[T any](ctx context.Context, size int, rep *PassReport, key func(T) string,
	fetch func(context.Context) ([]T, error), handle func(context.Context, T) (itemOutcome, error),
) error {
	seen := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		items, err := fetch(ctx)
		if err != nil {
			return err
		}
		fresh := 0
		for _, it := range items {
			k := key(it)
			if seen[k] {
				continue
			}
			seen[k] = true
			fresh++
			rep.Found++
			o, err := handle(ctx, it)
			if err != nil && ctx.Err() != nil {
				// The pass ran out of time (or leadership) mid-item; the item is not a failure of its own.
				return ctx.Err()
			}
			switch o {
			case outDone:
				rep.Done++
			case outSkipped:
				rep.Skipped++
			case outFailed:
				rep.fail(err)
			}
		}
		if len(items) < size || fresh == 0 {
			return nil
		}
	}
}

func sessionThreadKey(s db.Session) string { return s.ThreadKey }

// byStatus pages through the sessions in status by thread key. The pages never repeat, so
// drainBatches stops at the first short one.
func (m *Maintainer) byStatus(status db.SessionStatus) func(context.Context) ([]db.Session, error) {
	after := ""
	return func(ctx context.Context) ([]db.Session, error) {
		ss, err := m.store.SessionsByStatus(ctx, status, after, m.cfg.BatchSize)
		if len(ss) > 0 {
			after = ss[len(ss)-1].ThreadKey
		}
		return ss, err
	}
}

// withThread runs f on the session re-read under the thread's lock. A thread whose lock is held (a
// turn is running) is skipped rather than waited for, as is a session that disappeared.
func (m *Maintainer) withThread(ctx context.Context, threadKey string, f func(cur db.Session) (itemOutcome, error)) (itemOutcome, error) {
	lctx, cancel := context.WithTimeout(ctx, m.lockWait)
	unlock, err := m.store.LockThread(lctx, threadKey)
	busy := lctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && busy:
		return outSkipped, nil
	case err != nil:
		return outFailed, fmt.Errorf("lock thread %s: %w", threadKey, err)
	}
	defer unlock()
	cur, err := m.store.SessionGet(ctx, threadKey)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return outSkipped, nil
	case err != nil:
		return outFailed, err
	}
	return f(cur)
}

// settleCtx is for the status write that follows a provider call. It survives the end of the pass's
// context (bounded by settleTimeout): the sandbox has already been acted on, and a session left in
// pausing or destroying would only be finished by a later pass.
func (m *Maintainer) settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.settleTimeout)
}

// sandboxHandle decodes the session's handle; a session that never had a sandbox gives a zero
// handle. A handle of another provider (the deployment switched providers) is an error: this process
// cannot act on it, and guessing could touch the wrong thing.
func (m *Maintainer) sandboxHandle(s db.Session) (sandbox.Handle, error) {
	var h sandbox.Handle
	if len(s.Handle) > 0 {
		if err := json.Unmarshal(s.Handle, &h); err != nil {
			return h, fmt.Errorf("session %s: sandbox handle: %w", s.ThreadKey, err)
		}
	}
	if h.ID != "" && h.Provider != "" && h.Provider != m.prov.Name() {
		return h, fmt.Errorf("session %s: its sandbox belongs to provider %q, this process runs %q",
			s.ThreadKey, h.Provider, m.prov.Name())
	}
	return h, nil
}

// IdlePass pauses active sessions idle since before now-IdleTimeout: active → pausing, provider
// Stop, → paused. A sandbox that turns out to be gone is recorded as destroyed (the next turn
// creates a new one). A failed Stop moves the session back to active with LastError set; since that
// also resets its activity time, the next attempt comes one IdleTimeout later, not on every tick.
//
// It first finishes sessions left in pausing by a pass that died half-way: under the thread lock
// nobody else can be working on them.
func (m *Maintainer) IdlePass(ctx context.Context) (PassReport, error) {
	var rep PassReport
	err := drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey, m.byStatus(db.SessionPausing),
		func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				if cur.Status != db.SessionPausing {
					return outSkipped, nil
				}
				return m.stopLocked(ctx, cur)
			})
		})
	if err != nil {
		return rep, fmt.Errorf("agentpool: idle-pause: %w", err)
	}

	cutoff := m.now().Add(-m.cfg.IdleTimeout)
	err = drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey,
		func(ctx context.Context) ([]db.Session, error) {
			return m.store.SessionsIdle(ctx, cutoff, m.cfg.BatchSize)
		},
		func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				// A turn may have run between the query and the lock.
				if cur.Status != db.SessionActive || !cur.LastActivityAt.Before(cutoff) {
					return outSkipped, nil
				}
				if _, err := m.sandboxHandle(cur); err != nil {
					return outFailed, err
				}
				_, err := m.store.SessionTransition(ctx, cur.ThreadKey, db.Transition{
					From: []db.SessionStatus{db.SessionActive}, To: db.SessionPausing,
				})
				switch {
				case errors.Is(err, db.ErrConflict):
					return outSkipped, nil
				case err != nil:
					return outFailed, err
				}
				return m.stopLocked(ctx, cur)
			})
		})
	if err != nil {
		return rep, fmt.Errorf("agentpool: idle-pause: %w", err)
	}
	return rep, nil
}

// stopLocked stops the sandbox of a session in pausing and settles its status. The caller holds the
// thread lock.
func (m *Maintainer) stopLocked(ctx context.Context, cur db.Session) (itemOutcome, error) {
	h, err := m.sandboxHandle(cur)
	if err == nil && !h.IsZero() {
		err = m.prov.Stop(ctx, h)
		if err != nil {
			err = fmt.Errorf("stop sandbox %s of %s: %w", h.ID, cur.ThreadKey, err)
		}
	}
	sctx, cancel := m.settleCtx(ctx)
	defer cancel()
	from := []db.SessionStatus{db.SessionPausing}
	switch {
	case err == nil && h.IsZero(), errors.Is(err, sandbox.ErrNotFound):
		// Nothing left to pause (never created, or removed behind our back).
		_, err = m.store.SessionTransition(sctx, cur.ThreadKey, db.Transition{From: from, To: db.SessionDestroyed})
	case err == nil:
		_, err = m.store.SessionTransition(sctx, cur.ThreadKey, db.Transition{
			From: from, To: db.SessionPaused, Patch: db.SessionPatch{LastError: new("")},
		})
	default:
		_, terr := m.store.SessionTransition(sctx, cur.ThreadKey, db.Transition{
			From: from, To: db.SessionActive, Patch: db.SessionPatch{LastError: new("idle pause: " + err.Error())},
		})
		return outFailed, errors.Join(err, terr)
	}
	if err != nil {
		return outFailed, err
	}
	return outDone, nil
}

// CleanupPass destroys sessions paused since before now-PausedTTL: paused → destroying, provider
// Destroy, → destroyed. A failed Destroy leaves the session in destroying with LastError set, and
// the next pass retries it: that sweep of destroying sessions also finishes a pass that died
// half-way.
//
// A destroyed session keeps its Handle and SandboxID, as a record of what it last ran in: the reaper
// ignores destroyed sessions, and the resolver overwrites both when it creates the next sandbox.
func (m *Maintainer) CleanupPass(ctx context.Context) (PassReport, error) {
	var rep PassReport
	err := drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey, m.byStatus(db.SessionDestroying),
		func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				if cur.Status != db.SessionDestroying {
					return outSkipped, nil
				}
				return m.destroyLocked(ctx, cur)
			})
		})
	if err != nil {
		return rep, fmt.Errorf("agentpool: cleanup: %w", err)
	}

	cutoff := m.now().Add(-m.cfg.PausedTTL)
	err = drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey,
		func(ctx context.Context) ([]db.Session, error) {
			return m.store.SessionsPausedExpired(ctx, cutoff, m.cfg.BatchSize)
		},
		func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				// A turn may have resumed it between the query and the lock.
				if cur.Status != db.SessionPaused || !cur.PausedAt.Before(cutoff) {
					return outSkipped, nil
				}
				if _, err := m.sandboxHandle(cur); err != nil {
					return outFailed, err
				}
				_, err := m.store.SessionTransition(ctx, cur.ThreadKey, db.Transition{
					From: []db.SessionStatus{db.SessionPaused}, To: db.SessionDestroying,
				})
				switch {
				case errors.Is(err, db.ErrConflict):
					return outSkipped, nil
				case err != nil:
					return outFailed, err
				}
				return m.destroyLocked(ctx, cur)
			})
		})
	if err != nil {
		return rep, fmt.Errorf("agentpool: cleanup: %w", err)
	}
	return rep, nil
}

// destroyLocked destroys the sandbox of a session in destroying and settles its status. The caller
// holds the thread lock.
func (m *Maintainer) destroyLocked(ctx context.Context, cur db.Session) (itemOutcome, error) {
	h, err := m.sandboxHandle(cur)
	if err == nil && !h.IsZero() {
		// Destroy is idempotent; ErrNotFound is tolerated too, in case a provider reports it anyway.
		if err = m.prov.Destroy(ctx, h); errors.Is(err, sandbox.ErrNotFound) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("destroy sandbox %s of %s: %w", h.ID, cur.ThreadKey, err)
		}
	}
	sctx, cancel := m.settleCtx(ctx)
	defer cancel()
	if err != nil {
		_, uerr := m.store.SessionUpdate(sctx, cur.ThreadKey, db.SessionPatch{LastError: new("cleanup: " + err.Error())})
		return outFailed, errors.Join(err, uerr)
	}
	if _, err := m.store.SessionTransition(sctx, cur.ThreadKey, db.Transition{
		From: []db.SessionStatus{db.SessionDestroying}, To: db.SessionDestroyed, Patch: db.SessionPatch{LastError: new("")},
	}); err != nil {
		return outFailed, err
	}
	return outDone, nil
}

// ReapReport is what the reaper found and did.
type ReapReport struct {
	// Listed is how many sandboxes of this deployment the provider listed.
	Listed int
	// Orphans are the listed sandboxes that no live session owns and that are older than ReapGrace.
	Orphans []sandbox.Info
	// Destroyed is how many orphans were destroyed (zero in a dry run).
	Destroyed int
	DryRun    bool
	// Failed counts orphans whose Destroy failed; Errors holds the first few.
	Failed int
	Errors []error
}

func (r ReapReport) passReport() PassReport {
	p := PassReport{Found: len(r.Orphans), Done: r.Destroyed, Failed: r.Failed, Errors: r.Errors}
	if r.DryRun {
		p.Done = len(r.Orphans) // reporting them is the dry run's work
	}
	return p
}

// ReapPass destroys (or, with dryRun, only reports) the sandboxes of this deployment that no live
// session owns, once they are older than ReapGrace: the leftovers of creates that failed half-way,
// of turns cancelled mid-create, of sessions whose row was lost.
//
// It never touches a sandbox that does not carry this deployment's label: the provider is asked for
// this deployment only, and each listed sandbox's labels are checked again, so a provider that
// ignored the filter still cannot make the reaper touch a neighbour's sandbox. A sandbox whose age
// the provider does not report is kept.
func (m *Maintainer) ReapPass(ctx context.Context, dryRun bool) (ReapReport, error) {
	rep := ReapReport{DryRun: dryRun}
	infos, err := m.prov.List(ctx, map[string]string{sandbox.LabelDeployment: m.deployment})
	if err != nil {
		return rep, fmt.Errorf("agentpool: reaper: list sandboxes: %w", err)
	}
	rep.Listed = len(infos)
	cutoff := m.now().Add(-m.cfg.ReapGrace)
	old := make([]sandbox.Info, 0, len(infos))
	for _, info := range infos {
		switch {
		case info.Labels[sandbox.LabelDeployment] != m.deployment:
			m.log.Named(passReaper).Warn("provider listed a sandbox of another deployment; ignored",
				zap.String("sandbox", info.Handle.ID), zap.String("deployment", info.Labels[sandbox.LabelDeployment]))
		case info.Handle.ID == "", info.CreatedAt.IsZero(), !info.CreatedAt.Before(cutoff):
			// Too young (its session may not have saved the handle yet), or of unknown age.
		default:
			old = append(old, info)
		}
	}
	for start := 0; start < len(old); start += m.cfg.BatchSize {
		page := old[start:min(start+m.cfg.BatchSize, len(old))]
		ids := make([]string, len(page))
		for i, info := range page {
			ids[i] = info.Handle.ID
		}
		sessions, err := m.store.SessionsBySandboxIDs(ctx, ids)
		if err != nil {
			return rep, fmt.Errorf("agentpool: reaper: %w", err)
		}
		owned := make(map[string]bool, len(sessions))
		for _, s := range sessions {
			if s.Status != db.SessionDestroyed {
				owned[s.SandboxID] = true
			}
		}
		for _, info := range page {
			if owned[info.Handle.ID] {
				continue
			}
			rep.Orphans = append(rep.Orphans, info)
			if dryRun {
				continue
			}
			if err := m.prov.Destroy(ctx, info.Handle); err != nil {
				if ctx.Err() != nil {
					return rep, fmt.Errorf("agentpool: reaper: %w", ctx.Err())
				}
				rep.Failed++
				if len(rep.Errors) < maxReportErrors {
					rep.Errors = append(rep.Errors, fmt.Errorf("destroy orphan %s: %w", info.Handle.ID, err))
				}
				continue
			}
			rep.Destroyed++
			m.log.Named(passReaper).Info("destroyed orphan sandbox", zap.String("sandbox", info.Handle.ID),
				zap.String("thread", info.Labels[sandbox.LabelThread]), zap.Time("created", info.CreatedAt))
		}
	}
	return rep, nil
}

// WatchdogPass aborts running turns with no runtime event since before now-StuckAfter: it calls
// OnStuck (the pool cancels the turn if it runs it), then records the turn as failed. A turn that
// finishes on its own meanwhile is left as it finished.
func (m *Maintainer) WatchdogPass(ctx context.Context) (PassReport, error) {
	var rep PassReport
	cutoff := m.now().Add(-m.cfg.StuckAfter)
	msg := fmt.Sprintf("no progress from the agent for %s; aborted", humanDuration(m.cfg.StuckAfter))
	err := drainBatches(ctx, m.cfg.BatchSize, &rep,
		func(t db.Turn) string { return strconv.FormatInt(t.ID, 10) },
		func(ctx context.Context) ([]db.Turn, error) {
			return m.store.TurnsStuck(ctx, cutoff, m.cfg.BatchSize)
		},
		func(ctx context.Context, t db.Turn) (itemOutcome, error) {
			// The runtime may have sent an event since the query.
			cur, err := m.store.TurnGet(ctx, t.ID)
			switch {
			case errors.Is(err, db.ErrNotFound):
				return outSkipped, nil
			case err != nil:
				return outFailed, err
			case cur.Status != db.TurnRunning || !cur.LastEventAt.Before(cutoff):
				return outSkipped, nil
			}
			if m.onStuck != nil {
				m.onStuck(ctx, cur)
			}
			_, err = m.store.TurnFinish(ctx, t.ID, db.TurnResult{Status: db.TurnFailed, Error: msg})
			switch {
			case errors.Is(err, db.ErrConflict) && m.onStuck != nil:
				return outDone, nil // the cancelled turn recorded its own end first
			case errors.Is(err, db.ErrConflict):
				return outSkipped, nil // it finished on its own
			case err != nil:
				return outFailed, fmt.Errorf("fail stuck turn %d: %w", t.ID, err)
			}
			m.log.Named(passWatchdog).Info("aborted stuck turn", zap.Int64("turn", t.ID),
				zap.String("thread", t.ThreadKey), zap.Duration("silent_for", m.now().Sub(cur.LastEventAt).Round(time.Second)))
			return outDone, nil
		})
	if err != nil {
		return rep, fmt.Errorf("agentpool: watchdog: %w", err)
	}
	return rep, nil
}
