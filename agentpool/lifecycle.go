package agentpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// lifecycle is the one owner of every session transition (DESIGN §6). The turn's resolve, the admin
// commands (Pool.Pause/Resume/Destroy/Reset) and the loops (idle-pause, cleanup, reconcile) all call
// it, so they cannot disagree. Every method expects the caller to hold the thread's lock
// (db.Store.LockThread) and to pass the session as re-read under it.
//
// Decisions, made once here (DESIGN §6 "Lifecycle decisions"):
//
//	situation                                   decision
//	------------------------------------------  ---------------------------------------------------------
//	no row, row destroyed                       create (generation + 1) → active; history replayed
//	empty handle (never created, or cleared)    the session has no sandbox: destroyed; resolve creates
//	handle undecodable / of a provider not      destroyed ("unusable handle"); the old sandbox, if any, is
//	enabled here / refused by its provider      left to the reaper (no live session owns it); resolve
//	                                            recreates, Outcome.Recreate = RecreateUnusable
//	handle on another enabled provider than     the thread was moved (use, admin move) and the old sandbox
//	the session's                               is still there (a destroy that failed, a crash): Destroy
//	                                            it on its provider (once, no provider wait; failing, it is
//	                                            left to the reaper), recreate on the session's, history
//	                                            replayed, RecreateMoved
//	Inspect/Start/Stop says ErrNotFound         destroyed; resolve recreates (RecreateGone); pause and
//	                                            reconcile stop there (the next turn recreates)
//	Inspect says failed                         Destroy it, destroyed; resolve recreates (RecreateFailed)
//	Inspect says stopped/archived/starting      resume: resuming, Start, active; the fail count is reset
//	                                            once the runtime answers (healthy)
//	Start fails (not gone, not unavailable)     error, resume_fail_count + 1; the turn fails
//	resume_fail_count ≥ max_resume_failures     the next resolve Destroys the old sandbox and recreates,
//	                                            RecreateResumeFailed, history replayed, the user is told
//	runtime unhealthy after two Ensures         error, resume_fail_count + 1, the sandbox is stopped
//	provider unavailable                        a turn waits with backoff up to provider_wait, with a
//	(sandbox.ErrUnavailable)                    "waiting for the sandbox service" progress note, then fails;
//	                                            a loop fails the item and retries on its next pass;
//	                                            Create is retried only if it also says ErrNoEffect
//	Stop fails otherwise                        back to active with last_error (it may still run); the
//	                                            idle loop tries again one idle_timeout later
//	Destroy of a missing sandbox                success (Destroy is idempotent): destroyed
//	Destroy fails otherwise                     stays destroying with last_error; cleanup and reconcile
//	                                            retry it
//	session left creating/resuming/pausing/     reconcile (after reconcile_grace): Inspect; gone or no
//	error (crash, failed call)                  usable handle → destroyed; failed → destroyed (Destroy);
//	                                            otherwise Stop → paused (resume on the next turn)
//	session left destroying                     reconcile and cleanup finish the Destroy; a resolve finishes
//	                                            it too (never revives it) and recreates, RecreateDestroying
//	pause of a paused / destroy of a destroyed  no-op, success
//
// Fencing: every write that follows a provider call names the generation it acted on
// (db.Transition.IfGeneration), so a stale turn or loop cannot pause, destroy or record over a newer
// sandbox of the same thread; such a write fails with db.ErrConflict.
type lifecycle struct {
	store db.Store
	// provs are the enabled providers: a sandbox is acted on through its handle's provider, and
	// created on the session's (providers.go).
	provs *providerSet
	log   *zap.Logger
	// spec is the sandbox a session gets; nil where nothing may create one (the maintainer).
	spec func(db.Session) sandbox.Spec
	// maxResumeFailures is how many failed resumes the next resolve tolerates before it recreates.
	maxResumeFailures int
	// providerWait bounds how long an operation waits out sandbox.ErrUnavailable (0: not at all).
	providerWait time.Duration
}

// RecreateReason says why a turn replaced an existing sandbox (the bot tells the user).
type RecreateReason string

// The RecreateReason values; "" means no existing sandbox was replaced.
const (
	// RecreateGone: the sandbox was removed behind our back.
	RecreateGone RecreateReason = "gone"
	// RecreateFailed: the provider reported the sandbox as broken.
	RecreateFailed RecreateReason = "failed"
	// RecreateResumeFailed: the sandbox failed to resume lifecycle.max_resume_failures times.
	RecreateResumeFailed RecreateReason = "resume_failed"
	// RecreateUnusable: its stored handle could not be used (another provider configured since).
	RecreateUnusable RecreateReason = "unusable"
	// RecreateMoved: the thread was moved to another provider, and its old sandbox was still there.
	RecreateMoved RecreateReason = "moved"
	// RecreateDestroying: the old sandbox's destroy (a runtime or workspace move, a reset) had not
	// finished; the turn finished it.
	RecreateDestroying RecreateReason = "destroying"
)

// liveStatuses are every status a sandbox may be found in while it (maybe) exists.
var liveStatuses = []db.SessionStatus{
	db.SessionCreating, db.SessionActive, db.SessionPausing, db.SessionPaused,
	db.SessionResuming, db.SessionDestroying, db.SessionError,
}

var allStatuses = append(append([]db.SessionStatus{}, liveStatuses...), db.SessionDestroyed)

// pausableStatuses may be paused: active, and every status a crash or a failed call leaves a
// sandbox in that may still run (reconcile pauses those).
var pausableStatuses = []db.SessionStatus{
	db.SessionActive, db.SessionPausing, db.SessionError, db.SessionCreating, db.SessionResuming,
}

// Provider-wait backoff and the one blind retry of a create that surely did nothing.
const (
	providerBackoffMin = 250 * time.Millisecond
	providerBackoffMax = 10 * time.Second
	createRetryDelay   = 200 * time.Millisecond
	// settleTimeout bounds a status write after a provider call, which runs even when the caller's
	// context ended: the sandbox has been acted on, and the row should say so.
	settleTimeout = 10 * time.Second
)

// ErrProviderUnavailable is sandbox.ErrUnavailable, for layers that may not import sandbox (bot): a
// turn that waited lifecycle.provider_wait for the sandbox service and gave up wraps it.
var ErrProviderUnavailable = sandbox.ErrUnavailable

// NoteWaitingForProvider is the status note of a turn held by a provider outage (the bot words it).
const NoteWaitingForProvider = "waiting_for_provider"

// resolved is a session whose sandbox is running.
type resolved struct {
	sess db.Session
	sb   sandbox.Sandbox
	// created: the sandbox was made in this resolve, so its filesystem and agent session are new.
	created bool
	// recreate says why an existing sandbox was replaced ("" if none was).
	recreate RecreateReason
	// resumed: a stopped sandbox was started again.
	resumed bool
}

// outcome names what the resolve did, for Metrics.Resolve and seed 004's log events.
func (r resolved) outcome() (kind, event string) {
	switch {
	case r.recreate != "":
		return ResolveRecreate, EventResolveRecreate
	case r.created:
		return ResolveCreate, EventResolveCreate
	case r.resumed:
		return ResolveResume, EventResolveReuse
	}
	return ResolveReuse, EventResolveReuse
}

func gen(s db.Session) *int64 { g := s.Generation; return &g }

func settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// handle is the session's sandbox handle, through the one codec: one of a provider not enabled here
// is sandbox.ErrBadHandle.
func (l *lifecycle) handle(s db.Session) (sandbox.Handle, error) {
	return sandbox.DecodeHandleAmong(s.Handle, l.provs.names)
}

// provOf is the provider a (decoded, non-zero) handle's sandbox lives on.
func (l *lifecycle) provOf(h sandbox.Handle) sandbox.Provider {
	if p, ok := l.provs.get(h.Provider); ok {
		return p
	}
	return l.provs.def // not reached: handle refuses a provider not enabled
}

// resolve brings the session's sandbox to running: create, resume or recreate it as the table above
// says. note is called when the turn starts waiting for an unavailable provider.
func (l *lifecycle) resolve(ctx context.Context, sess db.Session, note func()) (resolved, error) {
	h, herr := l.handle(sess)
	switch {
	case sess.Status == db.SessionDestroyed, herr == nil && h.IsZero():
		// No sandbox (a new thread, or one that never got one): as if destroyed, create.
		return l.create(ctx, sess, note)
	case herr != nil:
		l.log.Warn("unusable sandbox handle; recreating", zap.String("thread", sess.ThreadKey), zap.Error(herr))
		return l.recreate(ctx, sess, RecreateUnusable, herr.Error(), note)
	case h.Provider != l.provs.pick(sess.Provider).Name():
		// A move whose destroy did not happen: try it once more, without waiting for a provider
		// that is down (moving off it may be the point). If it fails, the old sandbox is left to
		// its provider's reaper: once the new one is saved, no session owns it.
		why := fmt.Sprintf("moved from %s to %s", h.Provider, l.provs.pick(sess.Provider).Name())
		if err := l.provOf(h).Destroy(ctx, h); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			l.log.Warn("destroying the sandbox a moved thread left failed; the reaper will remove it",
				zap.String("thread", sess.ThreadKey), zap.String("provider", h.Provider), zap.String("sandbox", h.ID), zap.Error(err))
			why += fmt.Sprintf(" (its sandbox %s there is left to the reaper: %v)", h.ID, err)
		}
		return l.recreate(ctx, sess, RecreateMoved, why, note)
	case sess.Status == db.SessionDestroying:
		// A destroy that did not finish (it failed, or the process died in it) was meant: a move to
		// another runtime or workspace, a reset, an admin or idle destroy. Finish it rather than revive
		// the sandbox, which may run another runtime or hold another checkout, and recreate.
		prov := l.provOf(h)
		err := l.withProvider(ctx, note, func() error { return prov.Destroy(ctx, h) })
		if err != nil && !destroyDone(err) {
			return resolved{}, fmt.Errorf("finish destroying the sandbox: %w", err)
		}
		return l.recreate(ctx, sess, RecreateDestroying, "its destroy had not finished", note)
	case l.maxResumeFailures > 0 && sess.ResumeFailCount >= l.maxResumeFailures:
		// The old sandbox cannot be made to work: free it (idempotent) before replacing it.
		prov := l.provOf(h)
		// A sandbox already gone is destroyed, which is all this asked (Destroy is idempotent, also
		// for a provider that reports ErrNotFound anyway).
		if err := l.withProvider(ctx, note, func() error { return prov.Destroy(ctx, h) }); err != nil && !destroyDone(err) {
			return resolved{}, fmt.Errorf("destroy a sandbox that failed to resume: %w", err)
		}
		why := fmt.Sprintf("resume failed %d times", sess.ResumeFailCount)
		return l.recreate(ctx, sess, RecreateResumeFailed, why, note)
	}
	prov := l.provOf(h)
	var info sandbox.Info
	err := l.withProvider(ctx, note, func() (err error) { info, err = prov.Inspect(ctx, h); return err })
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return l.recreate(ctx, sess, RecreateGone, "sandbox gone", note)
	case unusableHandle(err):
		l.log.Warn("the provider refuses the sandbox handle; recreating", zap.String("thread", sess.ThreadKey), zap.Error(err))
		return l.recreate(ctx, sess, RecreateUnusable, "unusable sandbox handle: "+err.Error(), note)
	case err != nil:
		return resolved{}, fmt.Errorf("inspect sandbox: %w", err)
	}
	switch info.State {
	case sandbox.StateStopped, sandbox.StateArchived, sandbox.StateStarting:
		return l.resume(ctx, sess, h, note)
	case sandbox.StateFailed:
		if err := l.withProvider(ctx, note, func() error { return prov.Destroy(ctx, h) }); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return resolved{}, fmt.Errorf("destroy failed sandbox: %w", err)
		}
		return l.recreate(ctx, sess, RecreateFailed, "sandbox failed", note)
	}
	sess, err = l.markActive(ctx, sess)
	if err != nil {
		return resolved{}, err
	}
	return resolved{sess: sess, sb: sandbox.Bind(prov, h)}, nil
}

// recreate marks the old sandbox destroyed and creates a new one.
func (l *lifecycle) recreate(ctx context.Context, sess db.Session, why RecreateReason, msg string, note func()) (resolved, error) {
	sess, err := l.markDestroyed(ctx, sess, msg)
	if err != nil {
		return resolved{}, err
	}
	r, err := l.create(ctx, sess, note)
	r.recreate = why
	return r, err
}

// markDestroyed records that the session has no sandbox any more.
func (l *lifecycle) markDestroyed(ctx context.Context, sess db.Session, why string) (db.Session, error) {
	if sess.Status == db.SessionDestroyed {
		return sess, nil
	}
	s, err := l.store.SessionTransition(ctx, sess.ThreadKey, db.Transition{
		From: liveStatuses, To: db.SessionDestroyed, IfGeneration: gen(sess), Patch: db.SessionPatch{LastError: &why},
	})
	if err != nil {
		return sess, fmt.Errorf("mark sandbox destroyed: %w", err)
	}
	return s, nil
}

// markActive records that a running sandbox is in use.
func (l *lifecycle) markActive(ctx context.Context, sess db.Session) (db.Session, error) {
	if sess.Status == db.SessionActive {
		return sess, nil
	}
	s, err := l.store.SessionTransition(ctx, sess.ThreadKey, db.Transition{
		From: liveStatuses, To: db.SessionActive, IfGeneration: gen(sess),
	})
	if err != nil {
		return sess, fmt.Errorf("mark session active: %w", err)
	}
	return s, nil
}

// create makes a new sandbox (generation + 1) on the session's provider and saves its handle. The
// agent session id is cleared: it belonged to the old sandbox. The provider column is set to the
// provider used, so a session whose choice is no longer enabled records where it went.
func (l *lifecycle) create(ctx context.Context, sess db.Session, note func()) (resolved, error) {
	if l.spec == nil {
		return resolved{}, errors.New("agentpool: this component does not create sandboxes")
	}
	prov := l.provs.pick(sess.Provider)
	none, name := "", prov.Name()
	s, err := l.store.SessionTransition(ctx, sess.ThreadKey, db.Transition{
		From: allStatuses, To: db.SessionCreating, BumpGeneration: true, IfGeneration: gen(sess),
		Patch: db.SessionPatch{AgentSessionID: &none, Provider: &name},
	})
	if err != nil {
		return resolved{}, fmt.Errorf("begin sandbox create: %w", err)
	}
	sess = s
	spec := l.spec(sess)
	var h sandbox.Handle
	err = l.withProvider(ctx, note, func() (err error) { h, err = prov.Create(ctx, spec); return err })
	if err != nil && errors.Is(err, sandbox.ErrNoEffect) && !errors.Is(err, sandbox.ErrInvalidSpec) &&
		!errors.Is(err, sandbox.ErrUnavailable) && ctx.Err() == nil {
		// The provider surely did nothing (database/sql's ErrBadConn rule): one blind retry is safe.
		if waitCtx(ctx, createRetryDelay) == nil {
			h, err = prov.Create(ctx, spec)
		}
	}
	if err != nil {
		// Anything the failed create may have left behind carries our labels; the reaper removes it.
		// A cancelled turn is no failure of the session: reconcile settles it if no turn does.
		if ctx.Err() == nil {
			l.fail(ctx, sess, db.SessionCreating, fmt.Sprintf("create sandbox: %v", err), false)
		}
		return resolved{}, fmt.Errorf("create sandbox: %w", err)
	}
	raw, err := sandbox.EncodeHandle(h)
	if err != nil {
		return resolved{}, err
	}
	sid, noErr := h.ID, ""
	// Saved even if the turn was cancelled meanwhile: the sandbox exists and belongs to the thread.
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	s, err = l.store.SessionTransition(sctx, sess.ThreadKey, db.Transition{
		From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive, IfGeneration: gen(sess),
		Patch: db.SessionPatch{Handle: raw, SandboxID: &sid, LastError: &noErr}, ResumeFail: db.ResumeFailReset,
	})
	if err != nil {
		return resolved{}, fmt.Errorf("save sandbox handle: %w", err)
	}
	l.log.Info("sandbox created", zap.String("thread", s.ThreadKey), zap.String("sandbox", h.ID),
		zap.String("provider", name), zap.Int64("generation", s.Generation))
	return resolved{sess: s, sb: sandbox.Bind(prov, h), created: true}, nil
}

// resume starts a stopped sandbox: its filesystem, and so the thread's work, is kept.
func (l *lifecycle) resume(ctx context.Context, sess db.Session, h sandbox.Handle, note func()) (resolved, error) {
	s, err := l.begin(ctx, sess, liveStatuses, db.SessionResuming)
	if err != nil {
		return resolved{}, err
	}
	prov := l.provOf(h)
	err = l.withProvider(ctx, note, func() error { return prov.Start(ctx, h) })
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return l.recreate(ctx, s, RecreateGone, "sandbox gone while resuming", note)
	case unusableHandle(err):
		return l.recreate(ctx, s, RecreateUnusable, "unusable sandbox handle: "+err.Error(), note)
	case err != nil:
		// An outage says nothing about this sandbox: it does not count towards a recreate, which
		// would throw its files away.
		if ctx.Err() == nil {
			l.fail(ctx, s, db.SessionResuming, fmt.Sprintf("resume sandbox: %v", err), !errors.Is(err, sandbox.ErrUnavailable))
		}
		return resolved{}, fmt.Errorf("resume sandbox: %w", err)
	}
	// Recorded even if the turn was cancelled meanwhile: the sandbox is running now.
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	s, err = l.store.SessionTransition(sctx, sess.ThreadKey, db.Transition{
		From: []db.SessionStatus{db.SessionResuming}, To: db.SessionActive, IfGeneration: gen(s),
	})
	if err != nil {
		return resolved{}, fmt.Errorf("finish resume: %w", err)
	}
	l.log.Info("sandbox resumed", zap.String("thread", s.ThreadKey), zap.String("sandbox", h.ID))
	return resolved{sess: s, sb: sandbox.Bind(prov, h), resumed: true}, nil
}

// healthRecordEvery is how often a warm thread's runtime health is written down (healthy).
const healthRecordEvery = time.Minute

// healthDue reports whether a runtime that answered at `at` must be written down (record). Only then
// is a resume complete, so only then is the failed-resume count reset: a sandbox that starts but
// whose runtime never comes up keeps counting towards a recreate.
//
// A warm turn, whose session is active with nothing to reset and was recorded healthy less than
// healthRecordEvery ago, writes nothing: the write (a commit) would sit between the message and its
// prompt on every turn only to move a timestamp that nothing decides on. The turn holds the thread's
// lock and read the session under it, so there is no newer generation to fence against.
func healthDue(sess db.Session, at time.Time) bool {
	since := at.Sub(sess.LastHealthOKAt)
	return sess.Status != db.SessionActive || sess.ResumeFailCount != 0 || sess.LastHealthOKAt.IsZero() ||
		since < 0 || since >= healthRecordEvery
}

// record writes what a turn learned of its sandbox's runtime, in one fenced write (a stale turn
// cannot record over a newer sandbox): that it answered at *health (which resets the failed-resume
// count), and its agent session id *sid. A nil field is left as it is; with both nil nothing is
// written. A new sandbox learns both within milliseconds, so a turn writes them together: one commit
// fewer between a new thread's message and its prompt.
func (l *lifecycle) record(ctx context.Context, sess db.Session, health *time.Time, sid *string) (db.Session, error) {
	if health == nil && sid == nil {
		return sess, nil
	}
	t := db.Transition{
		From: []db.SessionStatus{db.SessionActive}, To: db.SessionActive, IfGeneration: gen(sess),
		Patch: db.SessionPatch{LastHealthOKAt: health, AgentSessionID: sid},
	}
	what := "saving agent session"
	if health != nil {
		t.ResumeFail, what = db.ResumeFailReset, "recording runtime health"
	}
	s, err := l.store.SessionTransition(ctx, sess.ThreadKey, t)
	if err != nil {
		return sess, fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// fail moves the session from `from` to error, counting a failed resume when asked. It survives the
// caller's cancellation: the failure is worth recording even when the turn was cancelled.
func (l *lifecycle) fail(ctx context.Context, sess db.Session, from db.SessionStatus, msg string, resumeFailed bool) {
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	op := db.ResumeFailKeep
	if resumeFailed {
		op = db.ResumeFailIncrement
	}
	_, err := l.store.SessionTransition(sctx, sess.ThreadKey, db.Transition{
		From: []db.SessionStatus{from}, To: db.SessionError, IfGeneration: gen(sess),
		Patch: db.SessionPatch{LastError: &msg}, ResumeFail: op,
	})
	if err != nil {
		l.log.Warn("recording session error", zap.String("thread", sess.ThreadKey), zap.Error(err))
	}
}

// runtimeFailed records a runtime that would not come up in a running sandbox (a failed resume, as
// the next resolve counts them), then stops the sandbox: nothing pauses a session in error, so it
// would otherwise run (and bill) until the next message or reconcile.
func (l *lifecycle) runtimeFailed(ctx context.Context, sess db.Session, h sandbox.Handle, msg string) {
	l.fail(ctx, sess, db.SessionActive, msg, true)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := l.provOf(h).Stop(sctx, h); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		l.log.Warn("stopping a sandbox whose runtime failed", zap.String("thread", sess.ThreadKey), zap.Error(err))
	}
}

// pause stops the session's sandbox, keeping its files: (pausable) → pausing → Stop → paused. No
// usable handle, or a sandbox gone, ends in destroyed; a failed Stop goes back to active with
// last_error. A paused session is left as it is.
func (l *lifecycle) pause(ctx context.Context, cur db.Session) (db.Session, error) {
	if cur.Status == db.SessionPaused {
		return cur, nil
	}
	s, err := l.begin(ctx, cur, pausableStatuses, db.SessionPausing)
	if err != nil {
		return cur, err
	}
	h, err := l.handle(s)
	if err == nil && !h.IsZero() {
		err = l.withProvider(ctx, nil, func() error { return l.provOf(h).Stop(ctx, h) })
	}
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	from := []db.SessionStatus{db.SessionPausing}
	switch {
	case err == nil && h.IsZero(), unusableHandle(err), errors.Is(err, sandbox.ErrNotFound):
		msg := ""
		if err != nil {
			msg = "pause: " + err.Error()
		}
		return l.settle(sctx, s, db.Transition{From: from, To: db.SessionDestroyed, Patch: db.SessionPatch{LastError: &msg}}, nil)
	case err == nil:
		return l.settle(sctx, s, db.Transition{From: from, To: db.SessionPaused, Patch: db.SessionPatch{LastError: new("")}}, nil)
	}
	err = fmt.Errorf("stop sandbox %s of %s: %w", h.ID, cur.ThreadKey, err)
	return l.settle(sctx, s, db.Transition{From: from, To: db.SessionActive, Patch: db.SessionPatch{LastError: new("pause: " + err.Error())}}, err)
}

// destroy removes the session's sandbox: (live) → destroying → Destroy → destroyed. A missing sandbox,
// or none, is success. A failed Destroy leaves the session destroying, with last_error, for cleanup
// and reconcile to finish. A destroyed session is left as it is.
func (l *lifecycle) destroy(ctx context.Context, cur db.Session) (db.Session, error) {
	if cur.Status == db.SessionDestroyed {
		return cur, nil
	}
	s, err := l.begin(ctx, cur, liveStatuses, db.SessionDestroying)
	if err != nil {
		return cur, err
	}
	h, herr := l.handle(s)
	if herr == nil && !h.IsZero() {
		err = l.withProvider(ctx, nil, func() error { return l.provOf(h).Destroy(ctx, h) })
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			err = nil // idempotent, also for a provider that reports it anyway
		case unusableHandle(err):
			herr, err = err, nil // as an undecodable handle: left to the reaper below
		}
	}
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	if err != nil {
		err = fmt.Errorf("destroy sandbox %s of %s: %w", h.ID, cur.ThreadKey, err)
		msg := "destroy: " + err.Error()
		if _, uerr := l.store.SessionUpdate(sctx, cur.ThreadKey, db.SessionPatch{LastError: &msg}); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return s, err
	}
	// An unusable handle leaves its sandbox, if any, to the reaper: no live session owns it now.
	msg := ""
	if herr != nil {
		msg = "destroy: " + herr.Error()
	}
	return l.settle(sctx, s, db.Transition{
		From: []db.SessionStatus{db.SessionDestroying}, To: db.SessionDestroyed, Patch: db.SessionPatch{LastError: &msg},
	}, nil)
}

// reconcile drives a session left between two stable states (creating, resuming, pausing, error,
// destroying) to a stable one, as the table above says.
func (l *lifecycle) reconcile(ctx context.Context, cur db.Session) (db.Session, error) {
	switch cur.Status {
	case db.SessionDestroying:
		return l.destroy(ctx, cur)
	case db.SessionCreating, db.SessionResuming, db.SessionPausing, db.SessionError:
	default:
		return cur, nil // settled meanwhile
	}
	h, err := l.handle(cur)
	if err != nil || h.IsZero() {
		why := "reconcile: no sandbox"
		if err != nil {
			why = "reconcile: " + err.Error()
		}
		return l.markDestroyed(ctx, cur, why)
	}
	info, err := l.provOf(h).Inspect(ctx, h)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return l.markDestroyed(ctx, cur, "reconcile: sandbox gone")
	case unusableHandle(err):
		return l.markDestroyed(ctx, cur, "reconcile: "+err.Error())
	case err != nil:
		return cur, fmt.Errorf("inspect sandbox %s of %s: %w", h.ID, cur.ThreadKey, err)
	case info.State == sandbox.StateFailed:
		return l.destroy(ctx, cur)
	}
	return l.pause(ctx, cur)
}

// begin makes the write before a provider call: the session moves from one of from to the transient
// status to, fenced to the generation it was read at.
func (l *lifecycle) begin(ctx context.Context, cur db.Session, from []db.SessionStatus, to db.SessionStatus) (db.Session, error) {
	s, err := l.store.SessionTransition(ctx, cur.ThreadKey, db.Transition{From: from, To: to, IfGeneration: gen(cur)})
	if err != nil {
		return cur, fmt.Errorf("begin %s: %w", to, err)
	}
	return s, nil
}

// settle writes the status after a provider call, fenced to the generation acted on, and joins a
// write failure to the call's error.
func (l *lifecycle) settle(ctx context.Context, s db.Session, t db.Transition, callErr error) (db.Session, error) {
	t.IfGeneration = gen(s)
	out, err := l.store.SessionTransition(ctx, s.ThreadKey, t)
	if err != nil {
		return s, errors.Join(callErr, fmt.Errorf("record %s: %w", t.To, err))
	}
	return out, callErr
}
