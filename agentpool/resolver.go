package agentpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// The resolver is a state machine over the session row and what the provider reports (DESIGN §6):
//
//	no row / destroyed / no handle        → createSandbox
//	Inspect: ErrNotFound                  → markDestroyed, then createSandbox (generation + 1)
//	Inspect: stopped / archived / failed  → resumeSandbox (failed: destroy, then createSandbox)
//	Inspect: running                      → markActive
//
// Each transition is one function, tested alone. The caller holds the thread lock, so the
// compare-and-set transitions below fail only if an operator or a loop raced us without the lock; that
// is reported, not retried.

// liveStatuses are every status a sandbox may be found in while it (maybe) exists.
var liveStatuses = []db.SessionStatus{
	db.SessionCreating, db.SessionActive, db.SessionPausing, db.SessionPaused,
	db.SessionResuming, db.SessionDestroying, db.SessionError,
}

var allStatuses = append(append([]db.SessionStatus{}, liveStatuses...), db.SessionDestroyed)

// createRetryDelay separates the one blind retry of a create that surely did nothing.
const createRetryDelay = 200 * time.Millisecond

// resolved is a session whose sandbox is running.
type resolved struct {
	sess db.Session
	sb   sandbox.Sandbox
	// created: the sandbox was made in this resolve, so its filesystem and agent session are new.
	created bool
}

// resolve brings the session's sandbox to running, creating, resuming or recreating it as needed.
func (p *Pool) resolve(ctx context.Context, sess db.Session) (resolved, error) {
	if sess.Status == db.SessionDestroyed || len(sess.Handle) == 0 {
		return p.createSandbox(ctx, sess)
	}
	h, err := decodeHandle(sess.Handle)
	if err != nil || h.Provider != p.prov.Name() {
		// A handle we cannot use (another provider configured since, or corrupt): the old sandbox is
		// left to its provider's reaper, and the thread gets a new one with its history replayed.
		p.log.Warn("unusable sandbox handle; recreating", zap.String("thread", sess.ThreadKey), zap.Error(err),
			zap.String("handle_provider", h.Provider))
		return p.recreate(ctx, sess, "unusable handle")
	}
	info, err := p.prov.Inspect(ctx, h)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return p.recreate(ctx, sess, "sandbox gone")
	case err != nil:
		return resolved{}, fmt.Errorf("inspect sandbox: %w", err)
	}
	switch info.State {
	case sandbox.StateStopped, sandbox.StateArchived, sandbox.StateStarting:
		return p.resumeSandbox(ctx, sess, h)
	case sandbox.StateFailed:
		if err := p.prov.Destroy(ctx, h); err != nil {
			return resolved{}, fmt.Errorf("destroy failed sandbox: %w", err)
		}
		return p.recreate(ctx, sess, "sandbox failed")
	}
	sess, err = p.markActive(ctx, sess)
	if err != nil {
		return resolved{}, err
	}
	return resolved{sess: sess, sb: sandbox.Bind(p.prov, h)}, nil
}

// recreate marks the old sandbox destroyed and creates a new one.
func (p *Pool) recreate(ctx context.Context, sess db.Session, why string) (resolved, error) {
	sess, err := p.markDestroyed(ctx, sess, why)
	if err != nil {
		return resolved{}, err
	}
	return p.createSandbox(ctx, sess)
}

// markDestroyed records that the session's sandbox no longer exists.
func (p *Pool) markDestroyed(ctx context.Context, sess db.Session, why string) (db.Session, error) {
	if sess.Status == db.SessionDestroyed {
		return sess, nil
	}
	s, err := p.store.SessionTransition(ctx, sess.ThreadKey, db.Transition{
		From: liveStatuses, To: db.SessionDestroyed, Patch: db.SessionPatch{LastError: &why},
	})
	if err != nil {
		return sess, fmt.Errorf("mark sandbox destroyed: %w", err)
	}
	return s, nil
}

// createSandbox makes a new sandbox (generation + 1) and saves its handle. The agent session id is
// cleared: it belonged to the old sandbox.
func (p *Pool) createSandbox(ctx context.Context, sess db.Session) (resolved, error) {
	none := ""
	s, err := p.store.SessionTransition(ctx, sess.ThreadKey, db.Transition{
		From: allStatuses, To: db.SessionCreating, BumpGeneration: true,
		Patch: db.SessionPatch{AgentSessionID: &none},
	})
	if err != nil {
		return resolved{}, fmt.Errorf("begin sandbox create: %w", err)
	}
	sess = s
	spec := p.spec(sess)
	if p.hooks.beforeCreate != nil {
		p.hooks.beforeCreate(ctx, sess.ThreadKey)
	}
	h, err := p.prov.Create(ctx, spec)
	if err != nil && errors.Is(err, sandbox.ErrNoEffect) && !errors.Is(err, sandbox.ErrInvalidSpec) && ctx.Err() == nil {
		// The provider surely did nothing (database/sql's ErrBadConn rule): one blind retry is safe.
		if waitCtx(ctx, createRetryDelay) == nil {
			h, err = p.prov.Create(ctx, spec)
		}
	}
	if err != nil {
		// Anything the failed create may have left behind carries our labels; the reaper removes it.
		// A cancelled turn is no failure of the session: it stays creating and the next turn creates.
		if ctx.Err() == nil {
			p.failSession(sess.ThreadKey, db.SessionCreating, fmt.Sprintf("create sandbox: %v", err), false)
		}
		return resolved{}, fmt.Errorf("create sandbox: %w", err)
	}
	raw, err := json.Marshal(h)
	if err != nil {
		return resolved{}, fmt.Errorf("encode handle: %w", err)
	}
	sid, noErr := h.ID, ""
	// Saved even if the turn was cancelled meanwhile: the sandbox exists and belongs to the thread.
	s, err = p.store.SessionTransition(context.WithoutCancel(ctx), sess.ThreadKey, db.Transition{
		From: []db.SessionStatus{db.SessionCreating}, To: db.SessionActive,
		Patch: db.SessionPatch{Handle: raw, SandboxID: &sid, LastError: &noErr}, ResumeFail: db.ResumeFailReset,
	})
	if err != nil {
		return resolved{}, fmt.Errorf("save sandbox handle: %w", err)
	}
	p.log.Info("sandbox created", zap.String("thread", s.ThreadKey), zap.String("sandbox", h.ID),
		zap.Int64("generation", s.Generation))
	return resolved{sess: s, sb: sandbox.Bind(p.prov, h), created: true}, nil
}

// resumeSandbox starts a stopped sandbox: its filesystem, and so the thread's work, is kept.
func (p *Pool) resumeSandbox(ctx context.Context, sess db.Session, h sandbox.Handle) (resolved, error) {
	s, err := p.store.SessionTransition(ctx, sess.ThreadKey, db.Transition{From: liveStatuses, To: db.SessionResuming})
	if err != nil {
		return resolved{}, fmt.Errorf("begin resume: %w", err)
	}
	if err := p.prov.Start(ctx, h); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return p.recreate(ctx, s, "sandbox gone while resuming")
		}
		if ctx.Err() == nil {
			p.failSession(sess.ThreadKey, db.SessionResuming, fmt.Sprintf("resume sandbox: %v", err), true)
		}
		return resolved{}, fmt.Errorf("resume sandbox: %w", err)
	}
	// Recorded even if the turn was cancelled meanwhile: the sandbox is running now.
	s, err = p.store.SessionTransition(context.WithoutCancel(ctx), sess.ThreadKey, db.Transition{
		From: []db.SessionStatus{db.SessionResuming}, To: db.SessionActive, ResumeFail: db.ResumeFailReset,
	})
	if err != nil {
		return resolved{}, fmt.Errorf("finish resume: %w", err)
	}
	p.log.Info("sandbox resumed", zap.String("thread", s.ThreadKey), zap.String("sandbox", h.ID))
	return resolved{sess: s, sb: sandbox.Bind(p.prov, h)}, nil
}

// markActive records that a running sandbox is in use.
func (p *Pool) markActive(ctx context.Context, sess db.Session) (db.Session, error) {
	if sess.Status == db.SessionActive {
		return sess, nil
	}
	s, err := p.store.SessionTransition(ctx, sess.ThreadKey, db.Transition{From: liveStatuses, To: db.SessionActive})
	if err != nil {
		return sess, fmt.Errorf("mark session active: %w", err)
	}
	return s, nil
}

// failSession moves the session from `from` to error, counting a failed resume when asked. It uses a
// fresh context: the failure is worth recording even when the turn was cancelled.
func (p *Pool) failSession(threadKey string, from db.SessionStatus, msg string, resumeFailed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	op := db.ResumeFailKeep
	if resumeFailed {
		op = db.ResumeFailIncrement
	}
	_, err := p.store.SessionTransition(ctx, threadKey, db.Transition{
		From: []db.SessionStatus{from}, To: db.SessionError, Patch: db.SessionPatch{LastError: &msg}, ResumeFail: op,
	})
	if err != nil {
		p.log.Warn("recording session error", zap.String("thread", threadKey), zap.Error(err))
	}
}

// spec is the sandbox a session gets.
func (p *Pool) spec(sess db.Session) sandbox.Spec {
	return sandbox.Spec{
		Image:        p.cfg.Image,
		Labels:       sandbox.Labels{Deployment: p.cfg.Deployment, Thread: sess.ThreadKey, Generation: sess.Generation},
		Env:          p.cfg.Env,
		BlockedEnv:   p.cfg.BlockedEnv,
		Resources:    p.cfg.Resources,
		Network:      p.cfg.Network,
		ReadOnlyRoot: p.cfg.ReadOnlyRoot,
	}
}

func decodeHandle(raw json.RawMessage) (sandbox.Handle, error) {
	var h sandbox.Handle
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, fmt.Errorf("decode sandbox handle: %w", err)
	}
	if h.IsZero() {
		return h, errors.New("decode sandbox handle: empty id")
	}
	return h, nil
}

// waitCtx waits d or until ctx ends.
func waitCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
