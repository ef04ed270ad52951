// Package opencode drives `opencode serve` inside a sandbox, reached through the provider's Dial (so
// it works with network none). The server is protected by a per-sandbox password derived from the
// service secret; sessions are titled by thread key and found again by title; a turn is prompt_async
// followed by the /event stream until session.idle (a stream that drops mid-turn is subscribed again
// and the run found where it stands: resume.go); abort is verified by the session going idle.
package opencode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/prompts"
	"github.com/threadbox/threadbox/sandbox"
)

// Name is the runtime's config name.
const Name = "opencode"

// Defaults for Config.
const (
	DefaultPort = 4096
	username    = "opencode"
)

// Config configures the runtime.
type Config struct {
	// Secret is the service secret the per-sandbox server passwords are derived from (required).
	Secret string
	// Model is the model opencode calls; its key reaches only the opencode process.
	Model Model
	// Binary is the opencode executable in the sandbox (default "opencode").
	Binary string
	// Port is the server's port on the sandbox's loopback (default DefaultPort).
	Port int
}

// Runtime implements runtime.Runtime for opencode. It is safe for concurrent use; its only state is
// a cache of connections per sandbox.
type Runtime struct {
	cfg     Config
	clients *sandboxhttp.Clients
	// resumeWindow bounds the attempts to follow a run again after its event stream dropped
	// (default DefaultResumeWindow).
	resumeWindow time.Duration
	// startGrace is how long a run that a resumption found not started yet has to show itself
	// before the turn looks again (default DefaultStartGrace).
	startGrace time.Duration
	// leftoverGrace bounds stopping a run left over from before a crash before a prompt (default
	// DefaultLeftoverGrace).
	leftoverGrace time.Duration
}

var _ runtime.Runtime = (*Runtime)(nil)

// New validates cfg and returns the runtime.
func New(cfg Config) (*Runtime, error) {
	if cfg.Secret == "" {
		return nil, errors.New("opencode: a service secret is required (the server passwords derive from it)")
	}
	if err := cfg.Model.Validate(); err != nil {
		return nil, err
	}
	if cfg.Binary == "" {
		cfg.Binary = "opencode"
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	return &Runtime{cfg: cfg, clients: &sandboxhttp.Clients{
		Port: cfg.Port,
		// The event stream is read for as long as a turn runs; only the headers are bounded.
		ResponseHeaderTimeout: 2 * time.Minute,
	}}, nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

var _ runtime.LogFile = (*Runtime)(nil)

// LogPath implements runtime.LogFile: the server's output, replaced at each launch.
func (r *Runtime) LogPath() string { return logPath }

type session struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Time  struct {
		Updated int64 `json:"updated"`
	} `json:"time"`
}

// Session implements runtime.Runtime: prevID if the server still has it, else the newest session
// titled title (the thread key: a lost id is found again), else a new session with that title (which
// also spares opencode a model call to invent one).
func (r *Runtime) Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (string, bool, error) {
	// Only opencode's own ids are asked for: anything else (another runtime's id, after a config
	// change) makes the server fail with a 500, which would read as the sandbox being down.
	if strings.HasPrefix(prevID, "ses_") {
		status, err := r.request(ctx, sb, http.MethodGet, "/session/"+url.PathEscape(prevID), nil, nil)
		switch {
		case err == nil:
			return prevID, false, nil
		case status != http.StatusNotFound && status != http.StatusBadRequest:
			return "", false, fmt.Errorf("opencode: looking up session %s: %w", prevID, err)
		}
	}
	if title != "" {
		var found []session
		if _, err := r.request(ctx, sb, http.MethodGet, "/session?roots=true&search="+url.QueryEscape(title), nil, &found); err != nil {
			return "", false, fmt.Errorf("opencode: searching sessions: %w", err)
		}
		var best *session
		for i, s := range found {
			if s.Title == title && runtime.CheckSessionID(s.ID) == nil && (best == nil || s.Time.Updated > best.Time.Updated) {
				best = &found[i]
			}
		}
		if best != nil {
			return best.ID, false, nil
		}
	}
	var created session
	if _, err := r.request(ctx, sb, http.MethodPost, "/session", map[string]any{"title": title}, &created); err != nil {
		return "", false, fmt.Errorf("opencode: creating a session: %w", err)
	}
	if err := runtime.CheckSessionID(created.ID); err != nil {
		return "", false, fmt.Errorf("opencode: creating a session: %w", err)
	}
	return created.ID, true, nil
}

// Prompt implements runtime.Runtime. p.Env is not used: the server process got its environment
// (the model key among it) when Ensure launched it, from Config.Model.
func (r *Runtime) Prompt(ctx context.Context, sb sandbox.Sandbox, sessionID string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	start := time.Now()
	// Before the subscription: the leftover's last events (its abort's idle, its aborted message)
	// must not reach this turn's stream, where they would read as this run's.
	if err := r.stopLeftover(ctx, sb, sessionID); err != nil {
		return runtime.Result{}, err
	}
	// The event stream outlives ctx: after a cancel it still tells when the abort took effect.
	ev, err := r.subscribe(ctx, sb)
	if err != nil {
		return runtime.Result{}, err
	}
	defer func() { ev.close() }()
	base, err := r.baseline(ctx, sb, sessionID)
	if err != nil {
		return runtime.Result{}, err
	}

	body := map[string]any{
		"parts": []any{map[string]string{"type": "text", "text": prompts.Message(p.History, p.Text)}},
		"model": map[string]string{"providerID": providerID, "modelID": r.cfg.Model.Name},
	}
	if p.System != "" {
		body["system"] = p.System
	}
	status, err := r.request(ctx, sb, http.MethodPost, "/session/"+url.PathEscape(sessionID)+"/prompt_async", body, nil)
	switch {
	case status == http.StatusNotFound:
		return runtime.Result{}, fmt.Errorf("opencode: session %s: %w", sessionID, runtime.ErrSessionMissing)
	case err != nil && (errors.Is(err, sandboxhttp.ErrSentUnanswered) || status >= 500):
		// The server got the prompt and may be running it (a server error, or a proxy's, came after
		// the whole request went out): the turn may not be sent again.
		return runtime.Result{}, fmt.Errorf("opencode: sending the prompt: %w", runtime.PromptCut(err))
	case err != nil:
		return runtime.Result{}, fmt.Errorf("opencode: sending the prompt: %w", err)
	}

	// From here on the agent has the prompt: no failure may read as one to send it again.
	turn := newTurnState(sessionID, emit)
	if err := r.follow(ctx, sb, &ev, turn, base); err != nil {
		if ctx.Err() != nil {
			r.stop(ctx, sb, ev, turn)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && p.Timeout > 0 {
				return runtime.Result{}, fmt.Errorf("opencode: the turn took longer than %s and was stopped", p.Timeout)
			}
			return runtime.Result{}, fmt.Errorf("opencode: turn stopped: %w", context.Cause(ctx))
		}
		return runtime.Result{}, err
	}

	msgs, err := r.answer(ctx, sb, sessionID)
	if err != nil {
		return runtime.Result{}, err
	}
	answer, usage, apiErr, took := outcome(msgs)
	if apiErr == nil {
		apiErr = turn.err
	}
	res := runtime.Result{Answer: answer, Usage: usage, Duration: took}
	if res.Duration == 0 {
		res.Duration = time.Since(start)
	}
	if apiErr != nil && apiErr.Name != "MessageAbortedError" {
		res.IsError, res.Answer = true, apiErr.userMessage()
	}
	return res, nil
}

// follow reads the session's events until it is idle, answering permission requests and questions
// on the way (nobody can answer them in a chat turn). A stream that drops is replaced (resume), and
// *ev is then the new one.
func (r *Runtime) follow(ctx context.Context, sb sandbox.Sandbox, ev **events, turn *turnState, base string) error {
	var pace sandboxhttp.Pacer // a stream that keeps dropping empty is not asked for again in a tight loop
	var recheck *time.Timer    // runs while a run a resumption did not find has yet to show itself
	defer func() {
		if recheck != nil {
			recheck.Stop()
		}
	}()
	for !turn.idle {
		var recheckC <-chan time.Time
		if !turn.busy && !turn.unseenSince.IsZero() {
			if recheck == nil {
				recheck = time.NewTimer(time.Until(turn.unseenSince.Add(r.grace())))
			}
			recheckC = recheck.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-recheckC:
			if err := r.recheck(ctx, sb, turn, base); err != nil {
				return err
			}
		case e, ok := <-(*ev).c:
			if !ok {
				cause := (*ev).err()
				if errors.Is(cause, sandbox.ErrTooLarge) {
					// Not the stream failing: following the run again would meet the same event.
					return fmt.Errorf("opencode: the event stream: %w", cause)
				}
				if cause == nil {
					cause = io.EOF
				}
				if pace.Wait(ctx) != nil {
					return ctx.Err()
				}
				nev, err := r.resume(ctx, sb, turn, base, cause)
				if err != nil {
					return err
				}
				(*ev).close()
				*ev = nev
				continue
			}
			pace.Reset()
			turn.handle(e)
			r.answerRequests(ctx, sb, turn)
		}
	}
	return nil
}

func (r *Runtime) answerRequests(ctx context.Context, sb sandbox.Sandbox, turn *turnState) {
	for _, id := range turn.permissions {
		_, _ = r.request(ctx, sb, http.MethodPost, "/permission/"+url.PathEscape(id)+"/reply", map[string]string{"reply": "always"}, nil)
	}
	for _, id := range turn.questions {
		_, _ = r.request(ctx, sb, http.MethodPost, "/question/"+url.PathEscape(id)+"/reject", nil, nil)
	}
	turn.permissions, turn.questions = nil, nil
}

// stopGrace bounds stopping a cancelled turn.
const stopGrace = 20 * time.Second

// stop aborts a turn whose caller gave up. An abort that arrives before the run started does not stop
// it (reference/agent-runtimes.md §1), so it first waits, briefly, for the session to turn busy.
func (r *Runtime) stop(ctx context.Context, sb sandbox.Sandbox, ev *events, turn *turnState) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace)
	defer cancel()
	if !turn.busy {
		wait, wcancel := context.WithTimeout(sctx, 5*time.Second)
		for !turn.busy && !turn.idle && wait.Err() == nil {
			select {
			case e, ok := <-ev.c:
				if !ok {
					wcancel()
					return
				}
				turn.handle(e)
			case <-wait.Done():
			}
		}
		wcancel()
	}
	_ = r.Abort(sctx, sb, turn.sessionID)
}

// Abort implements runtime.Runtime: abort, then confirm the session is idle, aborting again while it
// is not (a run that was starting when the first abort came).
func (r *Runtime) Abort(ctx context.Context, sb sandbox.Sandbox, sessionID string) error {
	delay := 20 * time.Millisecond
	for {
		status, err := r.request(ctx, sb, http.MethodPost, "/session/"+url.PathEscape(sessionID)+"/abort", nil, nil)
		if status == http.StatusNotFound {
			return nil // no such session: nothing runs
		}
		if err != nil {
			return fmt.Errorf("opencode: abort: %w", err)
		}
		busy, err := r.busy(ctx, sb, sessionID)
		if err != nil {
			return fmt.Errorf("opencode: abort: %w", err)
		}
		if !busy {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("opencode: abort: session %s still busy: %w", sessionID, ctx.Err())
		case <-t.C:
		}
		delay = min(delay*2, time.Second)
	}
}

// busy reports whether the server runs something on the session: any status but idle (busy, or
// retrying the model); the server lists only the sessions that are not idle.
func (r *Runtime) busy(ctx context.Context, sb sandbox.Sandbox, sessionID string) (bool, error) {
	var statuses map[string]struct {
		Type string `json:"type"`
	}
	if _, err := r.request(ctx, sb, http.MethodGet, "/session/status", nil, &statuses); err != nil {
		return false, fmt.Errorf("checking status: %w", err)
	}
	s, ok := statuses[sessionID]
	return ok && s.Type != "idle", nil
}

// DefaultLeftoverGrace bounds stopping a run left over from before a crash, before a prompt.
const DefaultLeftoverGrace = 30 * time.Second

// errLeftoverRunning is a run left over from before a crash that Abort could not stop in time.
var errLeftoverRunning = errors.New("a run from an earlier turn is still going on the session and could not be stopped")

// stopLeftover stops a run still going on the session before a prompt. Turns of a thread never
// overlap, so a session that is not idle when a turn begins runs a leftover: a turn whose runtime
// lost it (the bot crashed mid-turn, or its event stream dropped for good) and that nobody aborted.
// opencode would take the new prompt into that run (it is answered once the old run's tools and
// model calls are through, as one run), so the user's "retry" of an interrupted turn would run the
// old one on, and then again. It costs one GET /session/status when the session is idle. A leftover
// that does not stop within leftoverGrace fails the turn (errLeftoverRunning, before the prompt
// went out): running beside it is what this prevents, and the next turn tries again.
func (r *Runtime) stopLeftover(ctx context.Context, sb sandbox.Sandbox, sessionID string) error {
	busy, err := r.busy(ctx, sb, sessionID)
	if err != nil {
		return fmt.Errorf("opencode: the session before the prompt: %w", err)
	}
	if !busy {
		return nil
	}
	grace := r.leftoverGrace
	if grace <= 0 {
		grace = DefaultLeftoverGrace
	}
	actx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	err = r.Abort(actx, sb, sessionID)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("opencode: stopping the session's earlier run: %w", context.Cause(ctx))
	case actx.Err() != nil:
		return fmt.Errorf("opencode: session %s: %w within %s; the prompt was not sent", sessionID, errLeftoverRunning, grace)
	}
	return fmt.Errorf("opencode: stopping the session's earlier run: %w", err)
}
