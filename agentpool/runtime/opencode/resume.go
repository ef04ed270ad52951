package opencode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/sandbox"
)

// An event stream can drop while the agent works on (a tunnel through the provider's Dial that hiccups,
// a proxy's idle timeout, the server restarting its SSE). The prompt was taken by then, so sending it
// again could do the work twice: the turn subscribes again and learns from the server where the run
// is (still busy, or finished while we were away), and only a run it cannot find again ends the turn
// as runtime.ErrPromptCut.

// DefaultResumeWindow bounds how long a turn whose event stream dropped keeps trying to subscribe
// again before it gives the run up as cut.
const DefaultResumeWindow = time.Minute

// DefaultStartGrace is how long a run that a resumption found not started (the stream dropped before
// the run showed itself, and the server was idle without its answer) has to show itself before the
// turn looks again, and gives it up as lost if the server is still idle without it. opencode turns a
// taken prompt into a busy session in milliseconds (it writes the user message, then starts the
// run); a run that has not started after this never will: the server that took the prompt restarted
// (it keeps sessions, not runs) or failed it before the run, and would otherwise hold the turn until
// the watchdog.
const DefaultStartGrace = 30 * time.Second

// A resubscription is bounded until the server confirms it, from firstSubscribeAttempt, doubled up to
// maxSubscribeAttempt after each that got no answer: a server that restarted under the turn accepts
// connections a moment before it is ready and never answers what comes in that moment, which would
// hold the resumption for its whole window (and cut a run that was only about to show itself). The
// cap is the health check's (sandboxhttp.WaitHealthy): a server slower than that is not taken as up.
const (
	firstSubscribeAttempt = time.Second
	maxSubscribeAttempt   = 5 * time.Second
)

// maxRunMessages is how many of the session's newest messages a turn reads: its answer, and where a
// run it lost track of stands.
const maxRunMessages = 50

// baseline returns the id of the session's newest message before the prompt ("" for an empty session):
// every message after it belongs to this turn, which is how a turn that lost its stream before it saw
// anything tells its own run from the previous one.
func (r *Runtime) baseline(ctx context.Context, sb sandbox.Sandbox, sessionID string) (string, error) {
	var msgs []message
	status, err := r.request(ctx, sb, http.MethodGet, "/session/"+url.PathEscape(sessionID)+"/message?limit=1", nil, &msgs)
	switch {
	case status == http.StatusNotFound:
		return "", fmt.Errorf("opencode: session %s: %w", sessionID, runtime.ErrSessionMissing)
	case err != nil:
		return "", fmt.Errorf("opencode: reading the session before the prompt: %w", err)
	case len(msgs) == 0:
		return "", nil
	}
	return msgs[len(msgs)-1].Info.ID, nil
}

// resume subscribes to the events again after the stream dropped mid-turn (cause), and catches up
// with the run. It returns the new stream; turn.idle is set when the run ended while we were away.
// It retries with a backoff within the resume window; an error from it wraps runtime.ErrPromptCut,
// or is ctx's when the caller gave up.
func (r *Runtime) resume(ctx context.Context, sb sandbox.Sandbox, turn *turnState, base string, cause error) (*events, error) {
	var ev *events
	attempt := firstSubscribeAttempt
	err := sandboxhttp.Retry(ctx, r.window(), gone, func(ctx context.Context) error {
		var err error
		actx, cancel := context.WithTimeout(ctx, attempt)
		ev, err = r.subscribe(actx, sb) // a confirmed stream outlives actx
		unanswered := err != nil && ctx.Err() == nil && actx.Err() != nil
		cancel()
		if unanswered {
			err = fmt.Errorf("opencode: subscribing to events: %w: %w within %s", runtime.ErrSandboxDown, errNoAnswer, attempt)
			attempt = min(2*attempt, maxSubscribeAttempt)
			return err
		}
		if err != nil {
			return err
		}
		if err = r.catchUp(ctx, sb, turn, base, false); err != nil {
			ev.close()
		}
		return err
	})
	switch {
	case err == nil:
		// Even if ctx ended just now: the stream outlives ctx, and only the caller closes it.
		return ev, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("opencode: following the run again: %w", context.Cause(ctx))
	}
	return nil, fmt.Errorf("opencode: the event stream ended mid-turn (%v), and the run could not be followed again: %w", cause, runtime.PromptCut(err))
}

// recheck looks again, startGrace after a resumption found no sign of the run, at where it stands:
// busy (follow on), finished, or still not there, which is a run the server lost (errRunNotShown, so
// runtime.ErrPromptCut). Calls that fail are tried again within the resume window, as a resumption's.
func (r *Runtime) recheck(ctx context.Context, sb sandbox.Sandbox, turn *turnState, base string) error {
	err := sandboxhttp.Retry(ctx, r.window(), gone, func(ctx context.Context) error {
		return r.catchUp(ctx, sb, turn, base, true)
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("opencode: looking for the run again: %w", context.Cause(ctx))
	}
	return fmt.Errorf("opencode: the event stream ended before the run showed itself, and looking for it %s later: %w",
		r.grace(), runtime.PromptCut(err))
}

// grace is the start grace.
func (r *Runtime) grace() time.Duration {
	if r.startGrace > 0 {
		return r.startGrace
	}
	return DefaultStartGrace
}

// window is the resume window.
func (r *Runtime) window() time.Duration {
	if r.resumeWindow > 0 {
		return r.resumeWindow
	}
	return DefaultResumeWindow
}

// answer reads the session's newest messages once the run is over, trying again within the resume
// window: the answer is there, and a failure to read it must not make the prompt run again.
func (r *Runtime) answer(ctx context.Context, sb sandbox.Sandbox, sessionID string) ([]message, error) {
	var msgs []message
	err := sandboxhttp.Retry(ctx, r.window(), func(err error) bool {
		// A refusal (a 4xx other than 404) or an answer over its cap would only come again.
		return gone(err) || errors.Is(err, sandbox.ErrTooLarge) || errors.Is(err, errRefused)
	}, func(ctx context.Context) error {
		msgs = nil
		status, err := r.request(ctx, sb, http.MethodGet, "/session/"+url.PathEscape(sessionID)+fmt.Sprintf("/message?limit=%d", maxRunMessages), nil, &msgs)
		switch {
		case status == http.StatusNotFound:
			return fmt.Errorf("session %s: %w", sessionID, runtime.ErrSessionMissing)
		case err != nil && status > 0 && status < 500:
			return fmt.Errorf("%w: %w", errRefused, err)
		}
		return err
	})
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("opencode: reading the answer: %w", context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("opencode: reading the answer of a finished run: %w", runtime.PromptCut(err))
	}
	return msgs, nil
}

// errRefused is an answer that refused the call, for a reason that would not pass.
var errRefused = errors.New("refused")

// errRunLost is a run the server no longer has: it is idle, and the run's answer was never finished
// (the server restarted under it).
var errRunLost = errors.New("the server is idle, but the run never finished its answer")

// errRunNotShown is a run that never showed itself: startGrace after a resumption found no sign of it,
// the server is still idle without its answer (it restarted after it took the prompt, or failed it
// before the run).
var errRunNotShown = errors.New("the server is idle, and the run did not show itself within the start grace")

// gone reports whether err says the run cannot be found again however long we try: the sandbox is
// gone or stopped, the server refuses our password (another server), the session is gone, or the
// server lost the run.
func gone(err error) bool {
	return errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrNotRunning) ||
		errors.Is(err, errUnauthorized) || errors.Is(err, runtime.ErrSessionMissing) || errors.Is(err, errRunLost) ||
		errors.Is(err, errRunNotShown)
}

// catchUp learns, once subscribed again, where the run stands: still running (follow on: the new
// stream brings its end), finished while we were away (turn.idle), not started yet, or lost. It also
// answers the permission requests and questions the lost events asked, which would hang the run
// otherwise. Subscribing first and asking after means no change of state falls between the two.
// final is recheck's last look at a run not started yet: one still not there is lost.
func (r *Runtime) catchUp(ctx context.Context, sb sandbox.Sandbox, turn *turnState, base string, final bool) error {
	var statuses map[string]struct {
		Type string `json:"type"`
	}
	if _, err := r.request(ctx, sb, http.MethodGet, "/session/status", nil, &statuses); err != nil {
		return fmt.Errorf("opencode: the run's status: %w", err)
	}
	r.answerPending(ctx, sb, turn)
	if s, ok := statuses[turn.sessionID]; ok && s.Type != "idle" {
		turn.busy = true // busy, or retrying the model: its idle comes on the new stream
		return nil
	}
	var msgs []message
	status, err := r.request(ctx, sb, http.MethodGet, "/session/"+url.PathEscape(turn.sessionID)+fmt.Sprintf("/message?limit=%d", maxRunMessages), nil, &msgs)
	switch {
	case status == http.StatusNotFound:
		return fmt.Errorf("opencode: session %s: %w", turn.sessionID, runtime.ErrSessionMissing)
	case err != nil:
		return fmt.Errorf("opencode: the run's messages: %w", err)
	}
	var last *message
	for _, m := range runMessages(msgs, base) {
		if m.Info.Role == "assistant" {
			last = &m
		}
	}
	switch {
	case last != nil && (last.Info.Time.Completed > 0 || last.Info.Error != nil):
		// Finished (or failed, or was aborted) while we were away.
		turn.busy, turn.idle = true, true
		return nil
	case turn.busy:
		// It ran, and the server is idle with the answer unfinished: the server restarted under it.
		return errRunLost
	case final:
		// Still idle without an answer of this run, startGrace after the run was first missed: the
		// server lost it (it restarted after it took the prompt) or never started it.
		return errRunNotShown
	}
	// Not started yet, or about to start: its events come on the new stream. An unfinished answer
	// is no proof of a lost run here (the run may have started between the two reads), nor is a
	// missing one; follow looks again once startGrace has passed without a sign of the run.
	if turn.unseenSince.IsZero() {
		turn.unseenSince = time.Now()
	}
	return nil
}

// runMessages returns the messages after base: all of them when base is not among them (the session
// was empty, or the run outgrew the window read).
func runMessages(msgs []message, base string) []message {
	for i, m := range msgs {
		if base != "" && m.Info.ID == base {
			return msgs[i+1:]
		}
	}
	return msgs
}

// answerPending answers the turn's pending permission requests and questions, best effort: the
// events that asked them may have been lost with the stream.
func (r *Runtime) answerPending(ctx context.Context, sb sandbox.Sandbox, turn *turnState) {
	var pending []struct {
		ID        string `json:"id"`
		SessionID string `json:"sessionID"`
	}
	if _, err := r.request(ctx, sb, http.MethodGet, "/permission", nil, &pending); err == nil {
		for _, p := range pending {
			if p.SessionID == turn.sessionID {
				turn.permissions = append(turn.permissions, p.ID)
			}
		}
	}
	pending = nil
	if _, err := r.request(ctx, sb, http.MethodGet, "/question", nil, &pending); err == nil {
		for _, q := range pending {
			if q.SessionID == turn.sessionID {
				turn.questions = append(turn.questions, q.ID)
			}
		}
	}
	r.answerRequests(ctx, sb, turn)
}
