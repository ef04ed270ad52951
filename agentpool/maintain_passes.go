package agentpool

import (
	"context"
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
// nothing new. The second condition matters: a skipped candidate (its thread was busy, its provider
// down) stays in the query's result, and a full batch of those means this pass can make no more
// progress. So each fetch asks for as many more rows as are stuck that way (up to db.MaxBatch):
// otherwise a batch's worth of them, oldest first, would hide every candidate behind them, e.g. one
// provider's outage would keep the others' idle sandboxes running.
func drainBatches[T any](ctx context.Context, size int, rep *PassReport, key func(T) string,
	fetch func(ctx context.Context, limit int) ([]T, error), handle func(context.Context, T) (itemOutcome, error),
) error {
	seen := map[string]bool{}
	stuck := 0 // seen and not done: they may come back in every batch
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		limit := min(size+stuck, db.MaxBatch)
		items, err := fetch(ctx, limit)
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
				stuck++
			case outFailed:
				rep.fail(err)
				stuck++
			}
		}
		if len(items) < limit || fresh == 0 {
			return nil
		}
	}
}

func sessionThreadKey(s db.Session) string { return s.ThreadKey }

// byStatus pages through the sessions in status by thread key. The pages never repeat, so
// drainBatches stops at the first short one.
func (m *Maintainer) byStatus(status db.SessionStatus) func(context.Context, int) ([]db.Session, error) {
	after := ""
	return func(ctx context.Context, limit int) ([]db.Session, error) {
		ss, err := m.store.SessionsByStatus(ctx, status, after, limit)
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

// IdlePass pauses active sessions idle since before now-IdleTimeout: active → pausing, provider
// Stop, → paused. A sandbox that turns out to be gone is recorded as destroyed (the next turn
// creates a new one). A failed Stop moves the session back to active with LastError set; since that
// also resets its activity time, the next attempt comes one IdleTimeout later, not on every tick.
//
// It first finishes sessions left in pausing by a pass that died half-way: under the thread lock
// nobody else can be working on them.
func (m *Maintainer) IdlePass(ctx context.Context) (PassReport, error) {
	var rep PassReport
	g := m.newGuard(passIdle)
	defer g.finish()
	err := drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey, m.byStatus(db.SessionPausing),
		g.wrap(func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				if cur.Status != db.SessionPausing {
					return outSkipped, nil
				}
				return m.settled(m.life.pause(ctx, cur))
			})
		}))
	if err != nil {
		return rep, fmt.Errorf("agentpool: idle-pause: %w", err)
	}

	cutoff := m.now().Add(-m.cfg.IdleTimeout)
	err = drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey,
		func(ctx context.Context, limit int) ([]db.Session, error) {
			return m.store.SessionsIdle(ctx, cutoff, limit)
		},
		g.wrap(func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				// A turn may have run between the query and the lock.
				if cur.Status != db.SessionActive || !cur.LastActivityAt.Before(cutoff) {
					return outSkipped, nil
				}
				return m.settled(m.life.pause(ctx, cur))
			})
		}))
	if err != nil {
		return rep, fmt.Errorf("agentpool: idle-pause: %w", err)
	}
	return rep, nil
}

// settled turns a lifecycle transition's result into a pass outcome: a conflict means the row changed
// under the pass (another writer, or a newer generation), which is for a later pass, not a failure.
func (m *Maintainer) settled(_ db.Session, err error) (itemOutcome, error) {
	switch {
	case err == nil:
		return outDone, nil
	case errors.Is(err, db.ErrConflict):
		return outSkipped, nil
	}
	return outFailed, err
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
	g := m.newGuard(passCleanup)
	defer g.finish()
	err := drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey, m.byStatus(db.SessionDestroying),
		g.wrap(func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				if cur.Status != db.SessionDestroying {
					return outSkipped, nil
				}
				return m.settled(m.life.destroy(ctx, cur))
			})
		}))
	if err != nil {
		return rep, fmt.Errorf("agentpool: cleanup: %w", err)
	}

	cutoff := m.now().Add(-m.cfg.PausedTTL)
	err = drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey,
		func(ctx context.Context, limit int) ([]db.Session, error) {
			return m.store.SessionsPausedExpired(ctx, cutoff, limit)
		},
		g.wrap(func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				// A turn may have resumed it between the query and the lock.
				if cur.Status != db.SessionPaused || !cur.PausedAt.Before(cutoff) {
					return outSkipped, nil
				}
				return m.settled(m.life.destroy(ctx, cur))
			})
		}))
	if err != nil {
		return rep, fmt.Errorf("agentpool: cleanup: %w", err)
	}
	return rep, nil
}

// ReconcilePass drives sessions left between two stable states to a stable one: those in creating,
// resuming, pausing, destroying or error whose row has not changed for ReconcileGrace (a crash, a
// cancelled turn, a failed call). A destroying session is destroyed; the others are inspected: gone,
// or without a usable handle, they are marked destroyed (the next turn recreates); otherwise their
// sandbox is stopped and they are paused (the next turn resumes). So nothing is left running.
func (m *Maintainer) ReconcilePass(ctx context.Context) (PassReport, error) {
	var rep PassReport
	g := m.newGuard(passReconcile)
	defer g.finish()
	cutoff := m.now().Add(-m.cfg.ReconcileGrace)
	err := drainBatches(ctx, m.cfg.BatchSize, &rep, sessionThreadKey,
		func(ctx context.Context, limit int) ([]db.Session, error) {
			return m.store.SessionsUnsettled(ctx, cutoff, limit)
		},
		g.wrap(func(ctx context.Context, s db.Session) (itemOutcome, error) {
			return m.withThread(ctx, s.ThreadKey, func(cur db.Session) (itemOutcome, error) {
				// A turn may have settled it between the query and the lock. Its write usually makes
				// the row young again, but not always (a replica whose clock is behind, a write
				// delayed past the grace), so the status is checked as well: a settled row is left
				// alone and not reported as reconciled.
				if cur.Generation != s.Generation || !cur.UpdatedAt.Before(cutoff) || !unsettled(cur.Status) {
					return outSkipped, nil
				}
				now, err := m.life.reconcile(ctx, cur)
				out, err := m.settled(now, err)
				if out == outDone {
					m.log.Named(passReconcile).Info("reconciled session", zap.String("thread", cur.ThreadKey),
						zap.String("was", string(cur.Status)), zap.String("now", string(now.Status)), zap.String("last_error", cur.LastError))
				}
				return out, err
			})
		}))
	if err != nil {
		return rep, fmt.Errorf("agentpool: reconcile: %w", err)
	}
	return rep, nil
}

// unsettled reports whether status is one ReconcilePass drives to a stable state.
func unsettled(status db.SessionStatus) bool {
	switch status {
	case db.SessionCreating, db.SessionResuming, db.SessionPausing, db.SessionDestroying, db.SessionError:
		return true
	}
	return false
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
	// OrphanVolumes are the labelled volumes of this deployment that no sandbox mounts, older than
	// ReapGrace (providers with sandbox.VolumeReaper only): what a sandbox removed behind our back
	// leaves. VolumesRemoved is how many were removed (zero in a dry run).
	OrphanVolumes  []sandbox.Volume
	VolumesRemoved int
	// Failed counts orphans whose Destroy (or volume removal) failed, and providers that could not be
	// listed; Errors holds the first few.
	Failed int
	Errors []error
	// ListFailed names the providers that could not be listed in this pass (down, or erring).
	ListFailed []string
}

func (r ReapReport) passReport() PassReport {
	p := PassReport{Found: len(r.Orphans) + len(r.OrphanVolumes), Done: r.Destroyed + r.VolumesRemoved, Failed: r.Failed, Errors: r.Errors}
	if r.DryRun {
		p.Done = p.Found // reporting them is the dry run's work
	}
	return p
}

func (r *ReapReport) fail(err error) {
	r.Failed++
	if len(r.Errors) < maxReportErrors {
		r.Errors = append(r.Errors, err)
	}
}

// ReapPass destroys (or, with dryRun, only reports) the sandboxes of this deployment that no live
// session owns, once they are older than ReapGrace: the leftovers of creates that failed half-way,
// of turns cancelled mid-create, of sessions whose row was lost, of moves whose destroy failed.
//
// It covers every enabled provider, one after the other. A provider that cannot list (down, or
// answering errors) is counted as a failure in the report (Failed, Errors, ListFailed) and the others
// are still reaped; the pass as a whole fails only when no provider could be listed.
//
// It never touches a sandbox that does not carry this deployment's label: the provider is asked for
// this deployment only, and each listed sandbox's labels are checked again, so a provider that
// ignored the filter still cannot make the reaper touch a neighbour's sandbox. A sandbox whose age
// the provider does not report is kept.
func (m *Maintainer) ReapPass(ctx context.Context, dryRun bool) (ReapReport, error) {
	rep := ReapReport{DryRun: dryRun}
	var listErrs []error
	for _, prov := range m.provs.all() {
		err := m.reapProvider(ctx, prov, &rep)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return rep, fmt.Errorf("agentpool: reaper: %w", ctx.Err())
		default:
			err = fmt.Errorf("provider %s: %w", prov.Name(), err)
			listErrs = append(listErrs, err)
			rep.ListFailed = append(rep.ListFailed, prov.Name())
			rep.fail(err)
			m.met.ProviderDown(prov.Name(), passReaper)
			log := m.log.Named(passReaper).Debug
			if m.outage.begin(passReaper, prov.Name()) {
				log = m.log.Named(passReaper).Warn // once per outage, not once per pass
			}
			log("provider failed; the other providers are still reaped", zap.String("provider", prov.Name()), zap.Error(err))
		}
		if err == nil && m.outage.end(passReaper, prov.Name()) {
			m.log.Named(passReaper).Info("provider available again", zap.String("provider", prov.Name()))
		}
	}
	if len(listErrs) == len(m.provs.names) {
		return rep, fmt.Errorf("agentpool: reaper: %w", errors.Join(listErrs...))
	}
	return rep, nil
}

// reapProvider reaps one provider's orphans into rep. An error means the provider could not be
// listed (or the store read failed); destroy failures are counted in rep.
func (m *Maintainer) reapProvider(ctx context.Context, prov sandbox.Provider, rep *ReapReport) error {
	infos, err := prov.List(ctx, map[string]string{sandbox.LabelDeployment: m.deployment})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	rep.Listed += len(infos)
	orphansBefore := len(rep.Orphans)
	cutoff := m.now().Add(-m.cfg.ReapGrace)
	old := make([]sandbox.Info, 0, len(infos))
	for _, info := range infos {
		switch {
		case info.Labels[sandbox.LabelDeployment] != m.deployment:
			m.log.Named(passReaper).Warn("provider listed a sandbox of another deployment; ignored", zap.String("provider", prov.Name()),
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
			return err
		}
		owned := make(map[string]bool, len(sessions))
		for _, s := range sessions {
			if s.Status != db.SessionDestroyed && m.ownsOn(s, prov) {
				owned[s.SandboxID] = true
			}
		}
		for _, info := range page {
			if owned[info.Handle.ID] {
				continue
			}
			creating, err := m.createInFlight(ctx, prov, info)
			if err != nil {
				return err
			}
			if creating {
				continue
			}
			rep.Orphans = append(rep.Orphans, info)
			if rep.DryRun {
				continue
			}
			if err := prov.Destroy(ctx, info.Handle); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				rep.fail(fmt.Errorf("destroy orphan %s on %s: %w", info.Handle.ID, prov.Name(), err))
				continue
			}
			rep.Destroyed++
			m.log.Named(passReaper).Info("destroyed orphan sandbox", zap.String("provider", prov.Name()), zap.String("sandbox", info.Handle.ID),
				zap.String("thread", info.Labels[sandbox.LabelThread]), zap.Time("created", info.CreatedAt))
		}
	}
	// The reaper's view, for /metrics: every sandbox of the deployment, and those no session owns.
	m.met.Sandboxes(prov.Name(), len(infos), len(rep.Orphans)-orphansBefore)
	return m.reapVolumes(ctx, prov, rep)
}

// ownsOn reports whether the session's sandbox may be on prov: only a handle on this provider owns
// a sandbox of it (ids of two providers may look alike); one that cannot be decoded keeps it, to be
// safe.
func (m *Maintainer) ownsOn(s db.Session, prov sandbox.Provider) bool {
	h, herr := m.life.handle(s)
	return herr != nil || h.Provider == prov.Name()
}

// createInFlight reports whether info is the sandbox of a create still under way, or of one that
// has finished since the caller's ownership query (the session names it now): its labels name a
// session in creating, at the label's generation, on this provider, and the thread's lock is held
// (the creator holds it until the handle is saved). Such a session names the sandbox only once Create
// returns, which a slow provider (an image build, a long start) may do after ReapGrace. A create
// abandoned (cancelled, crashed) leaves the lock free, and its sandbox is an orphan.
func (m *Maintainer) createInFlight(ctx context.Context, prov sandbox.Provider, info sandbox.Info) (bool, error) {
	l := sandbox.ParseLabels(info.Labels)
	if l.Thread == "" {
		return false, nil
	}
	s, err := m.store.SessionGet(ctx, l.Thread)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("session of sandbox %s: %w", info.Handle.ID, err)
	case s.SandboxID == info.Handle.ID && s.Status != db.SessionDestroyed && m.ownsOn(s, prov):
		// The create finished since the ownership query read the row: the sandbox is the session's
		// now, and its turn is about to use it.
		return true, nil
	case s.Status != db.SessionCreating || s.Generation != l.Generation || m.provs.pick(s.Provider).Name() != prov.Name():
		return false, nil
	}
	// Busy (or gone meanwhile) keeps it for a later pass; under the lock, the create may have
	// finished since the listing and saved this very sandbox.
	out, err := m.withThread(ctx, l.Thread, func(cur db.Session) (itemOutcome, error) {
		if cur.SandboxID == info.Handle.ID && cur.Status != db.SessionDestroyed {
			return outSkipped, nil
		}
		return outDone, nil
	})
	if err != nil {
		return false, err
	}
	return out == outSkipped, nil
}

// reapVolumes removes this deployment's labelled volumes that no sandbox mounts, once older than
// ReapGrace. A volume belongs to exactly one sandbox (Create makes it with the container, Destroy
// removes both), so one that nothing mounts is owned by no session: its sandbox was removed behind
// our back (docker rm -f), and a recreate gave the thread a new one. The grace covers the window in
// Create between the volume and its container. The provider refuses a volume in use, so one mounted
// meanwhile is kept.
func (m *Maintainer) reapVolumes(ctx context.Context, prov sandbox.Provider, rep *ReapReport) error {
	vr, ok := sandbox.As[sandbox.VolumeReaper](prov)
	if !ok {
		return nil
	}
	vols, err := vr.ListVolumes(ctx, map[string]string{sandbox.LabelDeployment: m.deployment})
	if err != nil {
		return fmt.Errorf("list volumes: %w", err)
	}
	cutoff := m.now().Add(-m.cfg.ReapGrace)
	for _, v := range vols {
		if v.InUse || v.Labels[sandbox.LabelDeployment] != m.deployment || v.CreatedAt.IsZero() || !v.CreatedAt.Before(cutoff) {
			continue
		}
		rep.OrphanVolumes = append(rep.OrphanVolumes, v)
		if rep.DryRun {
			continue
		}
		if err := vr.RemoveVolume(ctx, v.Name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rep.fail(fmt.Errorf("remove orphan volume %s: %w", v.Name, err))
			continue
		}
		rep.VolumesRemoved++
		m.log.Named(passReaper).Info("removed orphan volume", zap.String("volume", v.Name),
			zap.String("thread", v.Labels[sandbox.LabelThread]), zap.Time("created", v.CreatedAt))
	}
	return nil
}

// WatchdogPass aborts running turns with no runtime event since before now-StuckAfter: it calls
// OnStuck (the pool cancels the turn if it runs it), then records the turn as failed. A turn that
// finishes on its own meanwhile is left as it finished.
//
// Only turns of this process (Instance) and of dead ones are aborted. A live other replica runs its
// turns under its own in-process watch (watch.go), which cancels a silent one after StuckAfter and
// then records and posts that end itself: failing the row here as well would record one end while
// the replica posts another (and, for a turn no longer stuck, a second reply). A running row such
// a replica no longer runs is ended by it (recoverInterrupted retries its write) or, once it dies,
// by recovery; so every turn still gets exactly one reply, from one process.
func (m *Maintainer) WatchdogPass(ctx context.Context) (PassReport, error) {
	var rep PassReport
	cutoff := m.now().Add(-m.cfg.StuckAfter)
	msg := fmt.Sprintf("no progress from the agent for %s; aborted", humanDuration(m.cfg.StuckAfter))
	alive := map[string]bool{}
	ours := func(ctx context.Context, owner string) (bool, error) {
		if m.instance != "" && owner == m.instance {
			return true, nil
		}
		live, ok := alive[owner]
		if !ok {
			var err error
			if live, err = m.store.InstanceAlive(ctx, owner); err != nil {
				return false, fmt.Errorf("is owner %q alive: %w", owner, err)
			}
			alive[owner] = live
		}
		return !live, nil
	}
	err := drainBatches(ctx, m.cfg.BatchSize, &rep,
		func(t db.Turn) string { return strconv.FormatInt(t.ID, 10) },
		func(ctx context.Context, limit int) ([]db.Turn, error) {
			return m.store.TurnsStuck(ctx, cutoff, limit)
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
			mine, err := ours(ctx, cur.Owner)
			switch {
			case err != nil:
				return outFailed, err
			case !mine:
				return outSkipped, nil // a live replica's: its own watch ends it
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
