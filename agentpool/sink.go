package agentpool

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// Sink receives a turn's progress and outcome; the bot implements it per platform.
type Sink interface {
	// Progress reports a runtime event or a lifecycle note. It is called from the turn's goroutines
	// (possibly two at once, for stdout and stderr) and must not block: coalesce or drop.
	Progress(ev runtime.Event)
	// Deliver posts the outcome. It returns, for each of out.Artifacts in order, the platform's id of
	// the uploaded file, or "" where the upload failed; only uploaded files are recorded as such, so a
	// failed one is offered again next turn. An error wrapping ErrNotPosted says that nothing of the
	// reply reached the chat: the turn then stays undelivered and is posted again later.
	Deliver(ctx context.Context, out Outcome) (fileIDs []string, err error)
}

// ErrNotPosted is what Sink.Deliver wraps when none of the reply reached the chat (the platform
// was down, or rate limited it for longer than the delivery may wait). Its message was
// acknowledged, so the answer must still arrive: the turn is left undelivered, and the process
// that owns it posts it again on its adoption pass (or, once that process has died, recovery
// does), for up to RepostFor after the turn ended. A reply posted in part is not reposted: a
// second copy of what did arrive would be worse than the gap.
var ErrNotPosted = errors.New("the reply did not reach the chat")

// RepostFor bounds how long after its end a turn whose reply did not get through is posted again.
const RepostFor = time.Hour

// Outcome is how a turn ended.
type Outcome struct {
	TurnID int64
	// Answer is the agent's answer, also when IsError (the agent reported failure).
	Answer  string
	IsError bool
	// Refusal is set when the turn was refused rather than run to its end (a *runtime.BudgetError,
	// code EBUDGET): the bot words it for the user in place of Answer, which holds the refusal's
	// message for the record. The turn still counts as done: nothing failed.
	Refusal error
	// Artifacts are new or changed files from output/display/; Skipped what was over a cap, to be
	// listed in the reply, never silently dropped.
	Artifacts []Artifact
	Skipped   []SkippedArtifact
	// Err is set when the turn could not run to an answer; Cancelled when it was stopped.
	Err       error
	Cancelled bool
	// Generation is the sandbox generation the turn ran in; Recreated is true when this turn had to
	// create the sandbox again (the history was replayed).
	Generation int64
	Recreated  bool
	// Recreate says why an existing sandbox was replaced ("" when none was, also on a thread's first
	// turn), so the bot can tell the user why their files are gone and the history was replayed.
	Recreate RecreateReason
	// Replayed is true when the conversation so far was replayed to a new sandbox or agent session.
	Replayed bool
	// Redelivered: the outcome is posted again from the record, by a process that took the turn over
	// from one that died while posting it; files are not attached again.
	Redelivered bool
	// Context says what the turn read of the chat thread before the message.
	Context ContextNote
	// Workspace is the Workspace's note for the user (a repository checked out, restored).
	Workspace string
	Usage     runtime.Usage
}

// NopSink discards everything.
type NopSink struct{}

// Progress implements Sink.
func (NopSink) Progress(runtime.Event) {}

// Deliver implements Sink.
func (NopSink) Deliver(context.Context, Outcome) ([]string, error) { return nil, nil }

// SinkFuncs adapts functions to Sink; nil fields do nothing.
type SinkFuncs struct {
	ProgressFunc func(runtime.Event)
	DeliverFunc  func(context.Context, Outcome) ([]string, error)
}

// Progress implements Sink.
func (s SinkFuncs) Progress(ev runtime.Event) {
	if s.ProgressFunc != nil {
		s.ProgressFunc(ev)
	}
}

// Deliver implements Sink.
func (s SinkFuncs) Deliver(ctx context.Context, out Outcome) ([]string, error) {
	if s.DeliverFunc != nil {
		return s.DeliverFunc(ctx, out)
	}
	return nil, nil
}

// safeSink keeps a panic in a Sink (the bot's code) inside the turn: a panicking Progress loses that
// event, a panicking Deliver counts as a failed post (not ErrNotPosted: part of it may have been
// posted, and a second copy is worse than a gap).
type safeSink struct {
	Sink
	log *zap.Logger
}

// guardSink wraps s in a safeSink, unless it is one already.
func (p *Pool) guardSink(s Sink) Sink {
	if _, ok := s.(safeSink); ok {
		return s
	}
	return safeSink{Sink: s, log: p.log}
}

func (s safeSink) Progress(ev runtime.Event) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("sink panicked on a progress event; dropped it", zap.Any("panic", v), zap.ByteString("stack", debug.Stack()))
		}
	}()
	s.Sink.Progress(ev)
}

func (s safeSink) Deliver(ctx context.Context, out Outcome) (ids []string, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("sink panicked delivering a turn's outcome", zap.Int64("turn", out.TurnID), zap.Any("panic", v),
				zap.ByteString("stack", debug.Stack()))
			ids, err = nil, fmt.Errorf("delivering: panic: %v", v)
		}
	}()
	return s.Sink.Deliver(ctx, out)
}
