package agentpool

import (
	"time"

	"go.uber.org/zap"
)

// Metrics receives what the pool and the maintainer do, for /metrics. agentpool imports no metrics
// library (DESIGN §2): cmd/threadbox/metrics implements this with Prometheus, and NopMetrics is the
// default. Every method must be cheap and must not block: they are called on the turn's path.
type Metrics interface {
	// TurnQueued moves the gauge of turns waiting on their thread's queue by delta (+1 on submit,
	// -1 when the turn starts or is dropped unrun).
	TurnQueued(delta int)
	// TurnStarted counts a turn taken off its queue after waiting wait; it is in flight until
	// TurnFinished.
	TurnStarted(wait time.Duration)
	// TurnFinished ends a turn in flight: outcome is one of the TurnOutcome* values.
	TurnFinished(outcome string, took time.Duration)
	// Resolve counts one step of bringing a thread's sandbox and agent session up, with its latency:
	// outcome is one of the Resolve* values.
	Resolve(provider, outcome string, took time.Duration)
	// Retry counts a recovery attempt: kind is one of the Retry* values.
	Retry(provider, kind string)
	// Pass records one maintenance pass: what it found and did, how long it took, and whether it
	// failed as a whole.
	Pass(name string, rep PassReport, took time.Duration, err error)
	// Leading says whether this process holds the maintenance loops' leader lease.
	Leading(leader bool)
	// Sandboxes is the reaper's view of the provider: how many sandboxes of this deployment exist,
	// and how many of them no live session owns (past the reap grace).
	Sandboxes(provider string, live, unowned int)
	// ProviderDown counts a maintenance pass in which a provider was unavailable (it could not list,
	// or answered sandbox.ErrUnavailable): the pass went on with the other providers.
	ProviderDown(provider, pass string)
}

// Turn outcomes (Metrics.TurnFinished).
const (
	TurnOutcomeDone      = "done"
	TurnOutcomeFailed    = "failed"
	TurnOutcomeCancelled = "cancelled"
	// TurnOutcomeTakenOver: another process claimed the turn (this one was thought dead).
	TurnOutcomeTakenOver = "taken_over"
	// TurnOutcomeLeftQueued: shutdown came before the turn started (it waited for a sandbox slot or
	// its thread's lock); it is left queued for the next process.
	TurnOutcomeLeftQueued = "left_queued"
)

// Resolve outcomes (Metrics.Resolve), after seed 004's counters: sandbox creates, resumes, session
// replacements.
const (
	// ResolveReuse: the thread's sandbox was running and was used as it was.
	ResolveReuse = "reuse"
	// ResolveResume: a stopped sandbox was started again, its files kept.
	ResolveResume = "resume"
	// ResolveCreate: the thread had no sandbox (a new thread, or one destroyed on purpose).
	ResolveCreate = "create"
	// ResolveRecreate: an existing sandbox was replaced (gone, failed, unusable, would not resume).
	ResolveRecreate = "recreate"
	// ResolveSessionReplaced: the runtime's agent session was missing and a new one was made.
	ResolveSessionReplaced = "session_replaced"
	// ResolveError: the sandbox could not be brought up.
	ResolveError = "error"
)

// Retry kinds (Metrics.Retry).
const (
	// RetryPrompt: a prompt failed as "sandbox down" or "session missing" and is run again after a
	// re-resolve.
	RetryPrompt = "prompt"
	// RetryHealth: the runtime did not answer its health check; Ensure is tried again.
	RetryHealth = "health"
	// RetryRuntimeRestart: the runtime came back on the second Ensure, which restarts its process.
	RetryRuntimeRestart = "runtime_restart"
)

// NopMetrics records nothing.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

// TurnQueued implements Metrics.
func (NopMetrics) TurnQueued(int) {}

// TurnStarted implements Metrics.
func (NopMetrics) TurnStarted(time.Duration) {}

// TurnFinished implements Metrics.
func (NopMetrics) TurnFinished(string, time.Duration) {}

// Resolve implements Metrics.
func (NopMetrics) Resolve(string, string, time.Duration) {}

// Retry implements Metrics.
func (NopMetrics) Retry(string, string) {}

// Pass implements Metrics.
func (NopMetrics) Pass(string, PassReport, time.Duration, error) {}

// Leading implements Metrics.
func (NopMetrics) Leading(bool) {}

// Sandboxes implements Metrics.
func (NopMetrics) Sandboxes(string, int, int) {}

// ProviderDown implements Metrics.
func (NopMetrics) ProviderDown(string, string) {}

// Seed 004's structured log events, by name: the log message is the event name, and every one carries
// the thread, the sandbox generation, the provider and the turn id (turnFields).
const (
	EventResolveStart    = "sandbox.resolve.start"
	EventResolveReuse    = "sandbox.resolve.reuse"
	EventResolveRecreate = "sandbox.resolve.recreate"
	// EventResolveCreate is ours, beside the seed's: a thread's first sandbox is no recreate.
	EventResolveCreate     = "sandbox.resolve.create"
	EventHealthRetry       = "sandbox.health.retry"
	EventSessionReplaced   = "sandbox.session.replaced"
	EventPromptOK          = "sandbox.prompt.ok"
	EventPromptRecoverable = "sandbox.prompt.recoverable_fail"
	EventPromptFatal       = "sandbox.prompt.fatal_fail"
	// EventPromptCut: the agent got the prompt and the runtime lost the run; not retried.
	EventPromptCut = "sandbox.prompt.cut"
)

// turnFields are the fields every seed 004 event carries.
func turnFields(thread string, generation int64, provider string, turnID int64) []zap.Field {
	return []zap.Field{zap.String("thread", thread), zap.Int64("generation", generation),
		zap.String("provider", provider), zap.Int64("turn", turnID)}
}
