package agentpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
)

// ErrStuck is the cancel cause of a turn that had no runtime event for Config.StuckAfter.
var ErrStuck = errors.New("no progress from the agent")

// ErrCancelled is the cancel cause of a turn stopped by Cancel.
var ErrCancelled = errors.New("stopped")

// ErrLockLost cancels a turn whose thread lock was lost (the database connection holding it died).
var ErrLockLost = errors.New("lost the thread's lock to a database failure; stopped so it cannot run twice")

// ErrReset is why queued turns of a thread that was reset did not run.
var ErrReset = errors.New("the thread was reset before this message ran")

// deliverTimeout bounds posting an outcome, which happens even when the turn was cancelled.
const deliverTimeout = 2 * time.Minute

// runTurn is one turn, start to end, on the thread's queue goroutine. It never returns an error:
// every failure becomes an Outcome for the sink and a turn row. queuedAt is when it was queued.
func (p *Pool) runTurn(ctx context.Context, req Request, turnID int64, queuedAt time.Time) {
	start := p.now()
	p.met.TurnStarted(start.Sub(queuedAt))
	// Admission first: a turn waiting in line for a sandbox slot stays queued (the watchdog leaves it
	// alone) and holds no lock.
	release, err := p.admit(ctx, req.ThreadKey, req.Sink)
	if err != nil {
		if p.leftQueued(ctx, req, turnID, start) {
			return
		}
		p.endTurn(req, turnID, Outcome{TurnID: turnID, Err: err, Cancelled: ctx.Err() != nil}, start)
		return
	}
	defer release()
	hold, err := p.store.HoldThread(ctx, req.ThreadKey)
	if err != nil {
		if p.leftQueued(ctx, req, turnID, start) {
			return
		}
		out := Outcome{TurnID: turnID, Err: classify(EINTERNAL, "wait for the thread lock", err)}
		if ctx.Err() != nil {
			// Why it was cancelled (reset, shutdown) is what the user needs to hear.
			out.Cancelled, out.Err = true, context.Cause(ctx)
		}
		p.endTurn(req, turnID, out, start)
		return
	}
	p.runLocked(ctx, req, turnID, start, hold, false)
}

// leftQueued reports whether the turn, not started (in line for a sandbox slot, waiting for its
// thread's lock or for its place at the start gate), was cut by the end of the shutdown grace, and
// then leaves it as dropTurn leaves a queued one: recorded queued, owned by this process, its files
// kept, unanswered here; the next process takes it over and runs it, so a restart loses no message.
func (p *Pool) leftQueued(ctx context.Context, req Request, turnID int64, start time.Time) bool {
	if !errors.Is(context.Cause(ctx), ErrClosed) {
		return false
	}
	p.log.Info("shutting down before a waiting turn started; the next process answers it",
		zap.Int64("turn", turnID), zap.String("thread", req.ThreadKey))
	p.met.TurnFinished(TurnOutcomeLeftQueued, p.now().Sub(start))
	return true
}

// runLocked runs a turn whose thread lock hold is held, and releases it at the end. started says the
// turn is recorded running already (startAtIntake); otherwise it is started here.
func (p *Pool) runLocked(ctx context.Context, req Request, turnID int64, start time.Time, hold db.Hold, started bool) {
	defer hold.Release()
	// Losing the thread lock (its connection died) means another process may take the thread: stop
	// at once rather than run beside it.
	ctx, cancelLost := context.WithCancelCause(ctx)
	defer cancelLost(nil)
	stopLost := context.AfterFunc(hold.Context(), func() { cancelLost(ErrLockLost) })
	defer stopLost()
	// The start, from here to the prompt, waits for its place (startgate.go). The lock is held
	// meanwhile: the thread's next turn would wait for this one anyway.
	pass := p.starts.enter(ctx)
	defer pass.done()
	if !started && p.leftQueued(ctx, req, turnID, start) {
		// Cut by the end of the shutdown grace while it waited for its place: not started, so left
		// queued for the next process, as a turn waiting for the lock is.
		return
	}
	if started {
		s, _, err := p.store.SessionCreate(ctx, p.newSession(req))
		p.runStarted(ctx, req, turnID, start, &sessionRead{sess: s, err: err}, pass)
		return
	}
	// The common case in one statement: no other process's older turn of this thread is left
	// unfinished, so start. Otherwise (a conflict, nothing changed) the slow path: answer a dead
	// owner's older turns first, then start as usual.
	//
	// The session is read meanwhile, on another connection: the start waits for the disk, the read
	// does not, and the prompt waits for both. The thread's lock is held, so nothing else changes
	// the session; only the slow path (older turns run first) makes the read stale, and it is not
	// used there.
	read := make(chan sessionRead, 1)
	go func() {
		s, _, err := p.store.SessionCreate(ctx, p.newSession(req))
		read <- sessionRead{sess: s, err: err}
	}()
	_, err := p.store.TurnStartFirst(ctx, turnID, p.instance)
	pre := <-read
	switch {
	case err == nil:
		p.runStarted(ctx, req, turnID, start, &pre, pass)
		return
	case !errors.Is(err, db.ErrConflict):
		// The start may have committed before the connection failed: the slow path's TurnStart
		// would then read this process's own start as another's and drop the turn in silence.
		// Answer with the failure instead (recording it ends the turn, started or not).
		out := Outcome{TurnID: turnID, Err: classify(EINTERNAL, "start turn", err)}
		if ctx.Err() != nil {
			out.Cancelled, out.Err = true, context.Cause(ctx)
		}
		pass.done()
		p.endTurn(req, turnID, out, start)
		return
	}
	p.takeOverThread(ctx, req.ThreadKey, turnID)
	p.runHeld(ctx, req, turnID, start, pass)
}

// runHeld runs a turn whose thread lock is held, from its start to its outcome. pass is its place in
// the start gate (nil: none).
func (p *Pool) runHeld(ctx context.Context, req Request, turnID int64, start time.Time, pass *startPass) {
	if _, err := p.store.TurnStart(ctx, turnID, p.instance); err != nil {
		if errors.Is(err, db.ErrConflict) {
			// Another process claimed it (this one was thought dead) and answers it: say nothing.
			p.log.Info("turn taken over by another process; not running it here", zap.Int64("turn", turnID))
			p.met.TurnFinished(TurnOutcomeTakenOver, p.now().Sub(start))
			return
		}
		pass.done()
		p.endTurn(req, turnID, Outcome{TurnID: turnID, Err: classify(EINTERNAL, "start turn", err)}, start)
		return
	}
	p.runStarted(ctx, req, turnID, start, nil, pass)
}

// sessionRead is a session read (or created) ahead of the turn's start.
type sessionRead struct {
	sess db.Session
	err  error
}

// newSession is the session a turn's thread gets if it has none.
func (p *Pool) newSession(req Request) db.NewSession {
	return db.NewSession{
		ThreadKey: req.ThreadKey, Platform: req.Platform, ChannelID: req.ChannelID,
		OwnerUserID: req.UserID, Provider: p.provs.def.Name(), Runtime: p.rts.def.Name(),
	}
}

// runStarted runs a started turn (running, ours, its thread lock held) to its outcome. pre is its
// session read under the lock, if it was read ahead; nil reads it now. pass is its place in the start
// gate, given back when the prompt goes to the agent or the turn fails before it (nil: none).
func (p *Pool) runStarted(ctx context.Context, req Request, turnID int64, start time.Time, pre *sessionRead, pass *startPass) {
	w := newWatch(ctx, p.cfg.StuckAfter, req.Sink, func() { p.touch(turnID) })
	out := p.executeGuarded(w.ctx, req, turnID, w, pre, pass)
	// Over, prompted or not: recording and posting the outcome (the chat's API) is not the start's.
	pass.done()
	cause := context.Cause(w.ctx)
	w.stop()
	if out.Err != nil && cause != nil {
		switch {
		case errors.Is(cause, ErrStuck):
			// Our own watchdog, or the leader's (it cancels with ErrStuck through CancelTurn).
			out.Err = fmt.Errorf("%w for %s; aborted", ErrStuck, p.cfg.StuckAfter)
		case errors.Is(cause, ErrClosed):
			// The shutdown grace ended while it ran: it may have done part of its work, as a turn
			// whose process died (recovery) did. Not "not run, send it again": interrupted, which
			// retry can run again on purpose.
			out.Err = ErrInterrupted
		case errors.Is(cause, ErrReset), errors.Is(cause, ErrLockLost):
			out.Cancelled, out.Err = true, cause
		case ctx.Err() != nil:
			out.Cancelled, out.Err = true, cause
		}
	}
	p.endTurn(req, turnID, out, start)
}

// executeGuarded is execute, with a panic in it (a runtime, a provider, a workspace or chat context
// callback) turned into the turn's failure, so the turn is still answered and recorded.
func (p *Pool) executeGuarded(ctx context.Context, req Request, turnID int64, w *watch, pre *sessionRead, pass *startPass) (out Outcome) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("turn panicked", zap.Int64("turn", turnID), zap.String("thread", req.ThreadKey),
				zap.Any("panic", v), zap.ByteString("stack", debug.Stack()))
			out = Outcome{TurnID: turnID, Err: classify(EINTERNAL, "run turn", fmt.Errorf("panic: %v", v))}
		}
	}()
	return p.execute(ctx, req, turnID, w, pre, pass)
}

// execute resolves the sandbox and runs the prompt, re-resolving once on a recoverable failure. pre
// is the session read ahead (nil: read it now); pass, the start's place in the gate, is given back
// as the prompt goes to the agent.
func (p *Pool) execute(ctx context.Context, req Request, turnID int64, w *watch, pre *sessionRead, pass *startPass) Outcome {
	out := Outcome{TurnID: turnID}
	if pre == nil {
		s, _, err := p.store.SessionCreate(ctx, p.newSession(req))
		pre = &sessionRead{sess: s, err: err}
	}
	sess, err := pre.sess, pre.err
	if err != nil {
		out.Err = classify(EINTERNAL, "load session", err)
		return out
	}
	chat, note := p.chatContext(ctx, req, sess, w.emitter().emit)
	out.Context = note
	var (
		res            runtime.Result
		forceNew       bool
		filesInGen     int64 = -1
		lastRecoverErr error
	)
	// rt is the thread's runtime; a change of it runs on the thread's queue, never during a turn.
	rt := p.runtimeOf(sess)
	// prov names the provider in logs and metrics: the one the thread's sandbox is (to be) on.
	prov := p.provs.pick(sess.Provider).Name()
	fields := func(extra ...zap.Field) []zap.Field {
		return append(turnFields(req.ThreadKey, sess.Generation, prov, turnID), extra...)
	}
	for attempt := 0; ; attempt++ {
		if attempt > 1 {
			// Recovered once and failed the same way again: the sandbox (or the agent's session in
			// it) is the problem, whichever call noticed.
			code, op := ESANDBOX, "sandbox stopped responding"
			if runtime.Classify(lastRecoverErr) == runtime.ClassSessionMissing {
				code, op = ERUNTIME, "agent session lost again"
			}
			out.Err = classify(code, op, lastRecoverErr)
			p.log.Warn(EventPromptFatal, fields(zap.Int("attempt", attempt), zap.Error(lastRecoverErr))...)
			return out
		}
		p.log.Info(EventResolveStart, fields(zap.Int("attempt", attempt))...)
		t0 := p.now()
		r, err := p.life.resolve(ctx, sess, func() {
			w.emitter().emit(runtime.Event{Kind: runtime.EventStatus, Note: NoteWaitingForProvider, At: p.now()})
		})
		took := p.now().Sub(t0)
		if err != nil {
			p.met.Resolve(prov, ResolveError, took)
			out.Err = classify(ESANDBOX, "prepare sandbox", err)
			return out
		}
		sess = r.sess
		prov = r.sb.Handle().Provider
		kind, event := r.outcome()
		p.met.Resolve(prov, kind, took)
		p.log.Info(event, fields(zap.String("outcome", kind), zap.String("reason", string(r.recreate)),
			zap.String("sandbox", r.sb.Handle().ID), zap.Duration("took", took))...)
		out.Generation, out.Recreated = sess.Generation, out.Recreated || r.created
		if r.recreate != "" {
			out.Recreate = r.recreate
		}
		// health is when the runtime answered, if that is due to be written: it goes down with the
		// agent session id below, in one write.
		health, err := p.ensureRuntime(ctx, r, turnID)
		if err != nil {
			if runtime.Classify(err) == runtime.ClassSandboxDown {
				lastRecoverErr = err
				continue
			}
			out.Err = classify(ERUNTIME, "start agent runtime", err)
			return out
		}
		// recordHealth records alone that the runtime answered, when the turn fails before the
		// write below: even if it was cancelled meanwhile (the failure may be the cancel).
		recordHealth := func() {
			sctx, cancel := settleCtx(ctx)
			defer cancel()
			if _, herr := p.life.record(sctx, sess, health, nil); herr != nil {
				p.log.Warn("recording runtime health", fields(zap.Error(herr))...)
			}
		}
		prev := sess.AgentSessionID
		if forceNew {
			prev = ""
		}
		t0 = p.now()
		sid, replaced, err := rt.Session(ctx, r.sb, prev, req.ThreadKey)
		if err != nil {
			recordHealth()
			if runtime.Classify(err) == runtime.ClassSandboxDown {
				lastRecoverErr = err
				continue
			}
			out.Err = classify(ERUNTIME, "agent session", err)
			return out
		}
		if !r.created && (replaced || forceNew || (sess.AgentSessionID != "" && sid != sess.AgentSessionID)) {
			p.met.Resolve(prov, ResolveSessionReplaced, p.now().Sub(t0))
			p.log.Info(EventSessionReplaced, fields(zap.String("previous", sess.AgentSessionID), zap.String("session", sid),
				zap.Bool("after_prompt_failure", forceNew))...)
		}
		var history string
		if r.created || replaced || forceNew || (sess.AgentSessionID != "" && sid != sess.AgentSessionID) {
			if history, err = p.history(ctx, sess); err != nil {
				// Not the new agent session: the next turn must replay the history to it.
				recordHealth()
				out.Err = classify(EINTERNAL, "load history", err)
				return out
			}
		}
		var newSid *string
		if sid != sess.AgentSessionID {
			newSid = &sid
		}
		if sess, err = p.life.record(ctx, sess, health, newSid); err != nil {
			out.Err = classify(EINTERNAL, "save agent session", err)
			return out
		}
		if filesInGen != sess.Generation {
			ws, err := p.prepareWorkspace(ctx, r, req)
			if err != nil {
				out.Err = err
				return out
			}
			out.Workspace = ws
			if err := p.copyInbound(ctx, r, req.Files); err != nil {
				out.Err = err // classified inside: the attachment or the sandbox
				return out
			}
			filesInGen = sess.Generation
		}
		emit := w.emitter()
		t0 = p.now()
		tctx, cancel := context.WithTimeout(ctx, p.cfg.TurnTimeout)
		tctx, limits := p.watchLimits(tctx, r.sb, r.created)
		alive := w.processAlive(rt)
		pass.done() // the start is over: the agent's work is not the CPU's here
		res, err = rt.Prompt(tctx, r.sb, sid, runtime.Prompt{
			Text: req.Text, System: p.cfg.SystemPrompt, History: withChatContext(chat, history), Env: p.cfg.RuntimeEnv, Timeout: p.cfg.TurnTimeout,
		}, emit.emit)
		alive()
		// Stopped by us (cancel, watchdog, shutdown, disk quota) or by the turn timeout: a server
		// runtime would keep working unless told.
		interrupted := tctx.Err() != nil
		limitErr := limits.finish(ctx)
		cancel()
		out.Replayed = out.Replayed || history != ""
		// Late events from this attempt's goroutines must not reach the user once it is over.
		emit.retire()
		took = p.now().Sub(t0)
		if limitErr != nil {
			// A limit explains the failure better than what the runtime saw (exit 137, a dead server),
			// and retrying in the same sandbox would hit it again.
			if runtime.Classify(err) == runtime.ClassNone {
				out = p.finishAnswer(ctx, r, res, out)
			} else if interrupted {
				p.abort(r, sid)
			}
			out.Err = limitErr
			return out
		}
		switch class := runtime.Classify(err); class {
		case runtime.ClassNone:
			p.log.Info(EventPromptOK, fields(zap.Duration("took", took), zap.Bool("is_error", res.IsError))...)
			return p.finishAnswer(ctx, r, res, out)
		case runtime.ClassInterrupted:
			// The agent got the prompt, and the runtime lost the run before it ended: sending the
			// prompt again could do the work twice (agents edit files, push, call APIs). The turn ends
			// as interrupted, which the user can run again on purpose (retry); a run that lives on
			// unobserved is stopped, so that it does not finish the work behind their back.
			p.log.Warn(EventPromptCut, fields(zap.Int("attempt", attempt), zap.Duration("took", took), zap.Error(err))...)
			p.abort(r, sid)
			out.Err = &Error{Code: EINTERRUPTED, Op: "prompt", Err: err}
			return out
		case runtime.ClassSessionMissing, runtime.ClassSandboxDown:
			lastRecoverErr = err
			forceNew = forceNew || class == runtime.ClassSessionMissing
			p.log.Warn(EventPromptRecoverable, fields(zap.Int("attempt", attempt), zap.String("class", className(class)),
				zap.Duration("took", took), zap.Error(err))...)
			if attempt == 0 {
				p.met.Retry(prov, RetryPrompt) // the loop re-resolves and prompts once more
			}
		default:
			p.log.Warn(EventPromptFatal, fields(zap.Int("attempt", attempt), zap.Bool("interrupted", interrupted),
				zap.Duration("took", took), zap.Error(err))...)
			if interrupted {
				p.abort(r, sid)
			}
			code := ERUNTIME
			if interrupted && ctx.Err() == nil {
				code = ETIMEOUT // only the turn's own limit ended; a cancel of ctx is runTurn's to name
			}
			out.Err = classify(code, "prompt", err)
			return out
		}
	}
}

// finishAnswer collects artifacts after a successful prompt.
func (p *Pool) finishAnswer(ctx context.Context, r resolved, res runtime.Result, out Outcome) Outcome {
	out.Answer, out.IsError, out.Usage, out.Refusal = res.Answer, res.IsError, res.Usage, res.Refusal
	// The answer waits for the files: a provider that trickles them (a remote daemon, a cloud API
	// under load) must not hold it back for longer than collectTimeout.
	cctx, cancel := context.WithTimeout(ctx, collectTimeout)
	defer cancel()
	found, skipped, err := CollectArtifacts(cctx, r.sb, p.store, r.sess.ThreadKey, p.cfg.Artifacts)
	if err != nil {
		// The answer matters more than the files: deliver it, and say what went wrong.
		p.log.Warn("collecting artifacts", zap.String("thread", r.sess.ThreadKey), zap.Error(err))
		// The user is told it could not be read; the provider's words are in the log line above.
		skipped = append(skipped, SkippedArtifact{Name: ArtifactDir, Reason: SkipUnreadable})
	}
	out.Artifacts, out.Skipped = found, skipped
	return out
}

// collectTimeout bounds collecting a turn's files after its answer (finishAnswer): on Docker a
// collection reads at most some 2.3 GiB (ArtifactSkipBytes, ArtifactPassBytes), about twenty seconds
// from a local daemon.
const collectTimeout = 2 * time.Minute

// ensureRuntime brings the runtime up, giving it a second chance (the runtime restarts its process on
// Ensure) before marking the session as failing. It returns when the runtime answered if that is due
// to be written down (healthDue; nil: nothing to write): the caller writes it (lifecycle.record),
// with whatever else it learns of the runtime next.
// turnID names the turn in the log (0 for an admin resume).
func (p *Pool) ensureRuntime(ctx context.Context, r resolved, turnID int64) (*time.Time, error) {
	var err error
	prov := r.sb.Handle().Provider
	rt := p.runtimeOf(r.sess)
	for attempt := range 2 {
		ectx, cancel := context.WithTimeout(ctx, p.cfg.EnsureTimeout)
		err = rt.Ensure(ectx, r.sb)
		cancel()
		if err == nil {
			if attempt > 0 {
				p.met.Retry(prov, RetryRuntimeRestart)
			}
			if at := p.now(); healthDue(r.sess, at) {
				return &at, nil
			}
			return nil, nil
		}
		if ctx.Err() != nil || runtime.Classify(err) == runtime.ClassSandboxDown {
			break
		}
		if attempt == 0 {
			p.met.Retry(prov, RetryHealth)
			p.log.Warn(EventHealthRetry, append(turnFields(r.sess.ThreadKey, r.sess.Generation, prov, turnID),
				zap.String("runtime", rt.Name()), zap.Error(err))...)
		}
	}
	if ctx.Err() == nil && runtime.Classify(err) != runtime.ClassSandboxDown {
		p.life.runtimeFailed(ctx, r.sess, r.sb.Handle(), fmt.Sprintf("runtime %s unhealthy: %v", rt.Name(), err))
	}
	return nil, fmt.Errorf("runtime %s: %w", rt.Name(), err)
}

// copyInbound puts the user's attachments into input/, reading each only now and at most
// MaxInboundFile bytes of it.
func (p *Pool) copyInbound(ctx context.Context, r resolved, files []InboundFile) error {
	used := map[string]int{}
	for _, f := range files {
		name := uniqueName(SanitizeName(f.Name), used)
		data, err := readInbound(ctx, f)
		if err != nil {
			// The user can act on it: send the file again, or a smaller one (ETOOLARGE, set inside).
			return classify(EINVALID, "read attachment "+name, err)
		}
		if err := r.sb.WriteFile(ctx, path.Join("input", name), data, 0o644); err != nil {
			return classify(ESANDBOX, "copy attachment "+name+" into the sandbox", err)
		}
	}
	return nil
}

func readInbound(ctx context.Context, f InboundFile) ([]byte, error) {
	if f.Open == nil {
		return nil, errors.New("no content")
	}
	rc, err := f.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxInboundFile+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > MaxInboundFile {
		return nil, &Error{Code: ETOOLARGE, Err: fmt.Errorf("over the %d-byte limit", MaxInboundFile)}
	}
	return data, nil
}

// abort asks the runtime to stop a cancelled turn, with its own short deadline.
func (p *Pool) abort(r resolved, sid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.runtimeOf(r.sess).Abort(ctx, r.sb, sid); err != nil {
		p.log.Warn("aborting runtime turn", zap.String("thread", r.sess.ThreadKey), zap.Error(err))
	}
}

// endTurn records the outcome, delivers it, then records which artifacts were uploaded. The turn
// counts as finished (Metrics.TurnFinished, measured from start) once its outcome is recorded, before
// the delivery: so whoever sees the answer also sees the count.
func (p *Pool) endTurn(req Request, turnID int64, out Outcome, start time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), deliverTimeout)
	defer cancel()
	result := db.TurnResult{Status: db.TurnDone, Answer: out.Answer}
	switch {
	case out.Cancelled:
		result.Status = db.TurnCancelled
	case out.Err != nil:
		result.Status = db.TurnFailed
	}
	if out.Err != nil {
		result.Error = out.Err.Error()
		if ErrorCode(out.Err) == EINTERRUPTED {
			// The marker retry looks for; the cause (a cut event stream) is in the log.
			result.Error = InterruptedText
		}
	}
	if out.Usage != (runtime.Usage{}) {
		result.Usage, _ = json.Marshal(out.Usage)
	}
	result.Owner = p.instance
	unrecorded := false
	switch err := p.retryWrite(ctx, func(ctx context.Context) error {
		_, err := p.store.TurnFinish(ctx, turnID, result)
		return err
	}); {
	case errors.Is(err, db.ErrNotOwner):
		// Another process claimed the turn (it found this one's locks gone: a partition, a lost
		// connection) and answers it: recording over its run, or a second reply, would be wrong.
		p.log.Info("turn taken over by another process; not answering it here", zap.Int64("turn", turnID), zap.Error(err))
		p.met.TurnFinished(TurnOutcomeTakenOver, p.now().Sub(start))
		return
	case err != nil && !errors.Is(err, db.ErrConflict):
		p.log.Warn("recording turn", zap.Int64("turn", turnID), zap.Error(err))
		// Still recorded running: without this, recovery would answer it a second time, as
		// interrupted, once this process has gone. The adoption pass writes it (adopt_orphans.go).
		unrecorded = !errors.Is(err, db.ErrNotFound)
	}
	// Ended here: a file the turn did not read (it failed first) is read by no one now.
	discardFiles(req.Files)
	p.met.TurnFinished(string(result.Status), p.now().Sub(start))
	var note *string
	if result.Status == db.TurnDone {
		n := handoffNote(req.Text, out.Answer)
		note = &n
	}
	if err := p.store.SessionTouch(ctx, req.ThreadKey, note); err != nil && !errors.Is(err, db.ErrNotFound) {
		p.log.Warn("recording activity and the hand-off note", zap.String("thread", req.ThreadKey), zap.Error(err))
	}
	ids, err := req.Sink.Deliver(ctx, out)
	// After the posts: a process that dies before this line leaves the turn undelivered, and
	// recovery posts its recorded outcome again (at least once, never not at all).
	settled := p.settleDelivery(ctx, turnID, p.now(), err)
	if unrecorded {
		// Remembered while this job still holds the turn, so the adoption pass never takes it for
		// an orphan.
		p.rememberUnrecorded(turnID, unrecordedEnd{result: result, settled: settled})
	}
	if len(out.Artifacts) > 0 {
		if err := RecordArtifacts(ctx, p.store, turnID, out.Artifacts, ids); err != nil {
			p.log.Warn("recording artifacts", zap.String("thread", req.ThreadKey), zap.Error(err))
		}
	}
}

// className names a recovery class in the log.
func className(c runtime.Class) string {
	switch c {
	case runtime.ClassSessionMissing:
		return "session_missing"
	case runtime.ClassSandboxDown:
		return "sandbox_down"
	case runtime.ClassInterrupted:
		return "interrupted"
	case runtime.ClassNone:
		return "none"
	}
	return "fatal"
}
