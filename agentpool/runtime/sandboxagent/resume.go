package sandboxagent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/sandbox"
)

// The event stream can drop while the agent works on (a tunnel through the provider's Dial that
// hiccups, a proxy's idle timeout), and so can the session/prompt call, which sandbox-agent holds
// open for the whole turn. The agent has the prompt by then, so sending it again could do the work
// twice. Every envelope of the ACP server, the prompt's response included, goes out on the stream with
// a sequence id, and the server replays what a subscriber missed (Last-Event-ID, from a buffer of the
// last 1024): the turn subscribes again after the last event it saw and reads on to the response. Only
// a run it cannot follow again (the server or the sandbox gone, events lost past the buffer) ends the
// turn, as runtime.ErrPromptCut.

// DefaultResumeWindow bounds how long a turn whose event stream dropped keeps trying to subscribe
// again before it gives the run up as cut.
const DefaultResumeWindow = time.Minute

// run is one prompt being followed.
type run struct {
	// ev is the stream, replaced when it drops.
	ev       *stream
	promptID string
	// posted gets the session/prompt call's outcome (nil once it came).
	posted <-chan postOutcome
	// last is the id of the last event seen; after a resume, expect is the id the next event must
	// have (empty: ids are not sequence numbers, nothing to check). lost is set when an event came
	// after a gap: the events between are gone; restarted when one came with an id below last: a new
	// sequence, from an ACP server created anew (none of it was seen, none of it is a replay).
	last, expect  string
	lost, restart bool
	// gen is the createdAtMs of the ACP server the turn began with (0: unknown), which a resumption
	// must find again.
	gen int64
	// pace spaces out resubscriptions that bring nothing new (a stream accepted and dropped at once,
	// again and again), which would otherwise be asked for in a tight loop.
	pace sandboxhttp.Pacer
}

// next records an event id, reporting false for an event seen already (a replay of last). An id
// below last is no replay: the server replays only what follows Last-Event-ID, and a stream's ids
// only grow; it is a sequence started over by an ACP server created anew (sandbox-agent restarted
// and a POST with ?agent= spawned the server again), whose events were never seen: it sets
// restart. Skipping them as seen would wait for ever for the prompt's response. Ids that are not
// sequence numbers are all taken as new.
func (r *run) next(id string) bool {
	n, errN := strconv.ParseUint(id, 10, 64)
	last, errL := strconv.ParseUint(r.last, 10, 64)
	switch {
	case errN == nil && errL == nil && n < last:
		r.restart = true
		return true
	case errN == nil && errL == nil && n == last:
		return false
	}
	if r.expect != "" && id != r.expect {
		r.lost = true
	}
	r.last, r.expect = usableEventID(id), ""
	return true
}

// postOutcome is how the session/prompt call ended: its HTTP status (0: no answer) and error.
type postOutcome struct {
	status int
	err    error
}

// failure is the turn's error for the call's outcome, nil when the turn goes on: the call answered
// (the response's echo on the stream ends the turn, in order with the updates before it), or its
// connection was cut after the prompt went out (the agent has it; the response still comes on the
// stream). A call that never went out is the sandbox being down (the prompt may be sent again); a
// server error after it went out leaves the prompt's fate unknown.
func (p postOutcome) failure() error {
	switch {
	case p.err == nil, errors.Is(p.err, sandboxhttp.ErrSentUnanswered):
		return nil
	case p.status >= 500:
		return fmt.Errorf("sandbox-agent: session/prompt: %w", runtime.PromptCut(p.err))
	}
	return fmt.Errorf("sandbox-agent: session/prompt: %w", p.err)
}

// resume subscribes again after run's stream dropped, from the last event seen. Its error wraps
// runtime.ErrPromptCut, or is ctx's when the caller gave up.
func (r *Runtime) resume(ctx context.Context, sb sandbox.Sandbox, run *run) error {
	cause := run.ev.err()
	if errors.Is(cause, sandbox.ErrTooLarge) {
		// Not the stream failing: following the run again would meet the same event.
		return fmt.Errorf("sandbox-agent: the event stream: %w", cause)
	}
	run.ev.close()
	if run.last == "" {
		// Without an id to start after, the server would replay all it keeps, and the events seen
		// already could not be told from the new ones.
		return fmt.Errorf("sandbox-agent: the event stream ended mid-turn (%v), with no event id to follow the run again from: %w", cause, runtime.ErrPromptCut)
	}
	var ev *stream
	err := sandboxhttp.Retry(ctx, r.window(), gone, func(ctx context.Context) error {
		var err error
		if ev, err = r.subscribe(ctx, sb, run.last); err != nil {
			return err
		}
		// Asked after subscribing: a server found unchanged then is the one subscribed to.
		if err = r.sameServer(ctx, sb, run.gen); err != nil {
			ev.close()
		}
		return err
	})
	switch {
	case err == nil:
		// Taken even if ctx ended just now: the stream outlives ctx, and only the caller closes it.
	case ctx.Err() != nil:
		return fmt.Errorf("sandbox-agent: following the run again: %w", context.Cause(ctx))
	default:
		return fmt.Errorf("sandbox-agent: the event stream ended mid-turn (%v), and the run could not be followed again: %w", cause, runtime.PromptCut(err))
	}
	run.ev, run.expect = ev, ""
	if n, err := strconv.ParseUint(run.last, 10, 64); err == nil {
		run.expect = strconv.FormatUint(n+1, 10)
	}
	return nil
}

// errServerRestarted is an ACP server that is not the one the turn began with: sandbox-agent
// restarted, and the agent's run went with the old one.
var errServerRestarted = errors.New("the ACP server was created anew since the turn began")

// sameServer checks that our ACP server is still the one of generation gen (its createdAtMs). A
// resumption can otherwise subscribe to a server created anew in the meantime (sandbox-agent
// restarted, and the prompt's POST, which carries ?agent=, spawned it again), whose event ids start
// over below the last one seen: the turn would skip them as seen already, its prompt's response
// among them, and wait for ever. gen 0 (not known) checks nothing.
func (r *Runtime) sameServer(ctx context.Context, sb sandbox.Sandbox, gen int64) error {
	if gen == 0 {
		return nil
	}
	now, err := r.generation(ctx, sb)
	switch {
	case err != nil:
		return err
	case now != gen:
		return fmt.Errorf("sandbox-agent: %w (created at %d ms, not %d; 0: not listed)", errServerRestarted, now, gen)
	}
	return nil
}

// gone reports whether a refused subscription says the run cannot be followed again however long we
// try: the ACP server is gone (404: sandbox-agent restarted, and the agent's run with it) or was
// created anew, the server refuses our token or the request, or the sandbox is gone or stopped.
func gone(err error) bool {
	return errors.Is(err, runtime.ErrSessionMissing) || errors.Is(err, errUnauthorized) || errors.Is(err, errRefused) ||
		errors.Is(err, errServerRestarted) || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrNotRunning)
}

// window is the resume window.
func (r *Runtime) window() time.Duration {
	if r.resumeWindow > 0 {
		return r.resumeWindow
	}
	return DefaultResumeWindow
}
