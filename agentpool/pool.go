package agentpool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// Config is what the pool needs to create sandboxes and run turns.
type Config struct {
	// Deployment is stamped on every sandbox (sandbox.LabelDeployment).
	Deployment   string
	Image        string
	Resources    sandbox.Resources
	Network      sandbox.NetworkMode
	ReadOnlyRoot bool
	// Env is the resolved create-time environment (sandbox.EnvPolicy.Resolve); BlockedEnv the extra
	// blocklist, enforced again by the provider.
	Env        map[string]string
	BlockedEnv []string
	// RuntimeEnv reaches only the runtime's own process (model keys), never the sandbox environment.
	RuntimeEnv map[string]string
	// SystemPrompt is sent with every prompt (prompts/).
	SystemPrompt string
	// Transcript caps the history replayed into a replaced sandbox or agent session.
	Transcript db.TranscriptLimit
	// Artifacts caps what a turn uploads.
	Artifacts ArtifactLimits
	// TurnTimeout bounds one prompt (default: Resources.ExecTimeout, else 1h).
	TurnTimeout time.Duration
	// EnsureTimeout bounds bringing the runtime up (default 2m).
	EnsureTimeout time.Duration
	// StuckAfter aborts a turn that has had no runtime event for this long (default 10m).
	StuckAfter time.Duration
	// MaxQueued caps the turns of one thread that run or wait in this process (default 50); Submit
	// refuses more with ErrQueueFull.
	MaxQueued int
	// MaxActive caps the live sandboxes of the deployment (0: no cap); see capacity.go.
	MaxActive int
	// StartConcurrency is how many turns do their start at once in this process (default: one per
	// CPU, at least 2); see startgate.go.
	StartConcurrency int
	// MaxResumeFailures is how many failed resumes of a thread's sandbox the next turn tolerates
	// before it recreates the sandbox, with the history replayed (lifecycle.max_resume_failures,
	// default 2).
	MaxResumeFailures int
	// ProviderWait is how long a turn waits out a provider outage (sandbox.ErrUnavailable) before it
	// fails (lifecycle.provider_wait, default 2m).
	ProviderWait time.Duration
	// EnforceLimits measures each turn against the sandbox's limits through Exec (limits.go): the
	// work directory against Resources.DiskMB, every LimitCheckInterval (default 5s) while the turn
	// runs and once after it, and the memory cgroup's kill count, so a turn ends with a LimitError.
	EnforceLimits      bool
	LimitCheckInterval time.Duration
	// AdoptAfter is how old a queued turn of this process, in none of its queues, must be before
	// AdoptPass queues it (default DefaultAdoptAfter; see adopt.go).
	AdoptAfter time.Duration
}

func (c Config) withDefaults() Config {
	c.TurnTimeout = cmp.Or(c.TurnTimeout, c.Resources.ExecTimeout, time.Hour)
	c.EnsureTimeout = cmp.Or(c.EnsureTimeout, 2*time.Minute)
	c.StuckAfter = cmp.Or(c.StuckAfter, 10*time.Minute)
	c.MaxQueued = cmp.Or(c.MaxQueued, DefaultMaxQueued)
	c.StartConcurrency = cmp.Or(c.StartConcurrency, max(2, goruntime.GOMAXPROCS(0)))
	c.LimitCheckInterval = cmp.Or(c.LimitCheckInterval, DefaultLimitCheckInterval)
	c.MaxResumeFailures = cmp.Or(c.MaxResumeFailures, DefaultMaxResumeFailures)
	c.ProviderWait = cmp.Or(c.ProviderWait, DefaultProviderWait)
	c.AdoptAfter = cmp.Or(c.AdoptAfter, DefaultAdoptAfter)
	c.Transcript.MaxTurns = cmp.Or(c.Transcript.MaxTurns, 20)
	c.Transcript.MaxChars = cmp.Or(c.Transcript.MaxChars, 12000)
	c.Artifacts = c.Artifacts.withDefaults()
	if c.Network == "" {
		c.Network = sandbox.NetworkNone
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Deployment == "":
		return errors.New("agentpool: Deployment is required")
	case c.Image == "":
		return errors.New("agentpool: Image is required")
	case c.TurnTimeout < 0, c.EnsureTimeout < 0, c.StuckAfter < 0, c.ProviderWait < 0, c.AdoptAfter < 0:
		return errors.New("agentpool: timeouts must not be negative")
	case c.MaxQueued < 0, c.MaxActive < 0, c.StartConcurrency < 0:
		return errors.New("agentpool: MaxQueued, MaxActive and StartConcurrency must not be negative")
	case c.MaxResumeFailures < 0:
		return errors.New("agentpool: MaxResumeFailures must not be negative")
	}
	return c.Artifacts.validate()
}

// Deps are the pool's collaborators.
type Deps struct {
	Store db.Store
	// Provider is the default sandbox provider (sandbox.provider): new threads, and threads whose
	// recorded provider is empty or no longer enabled, get their sandboxes there.
	Provider sandbox.Provider
	// Providers are the further providers the deployment enables (sandbox.providers); a thread may
	// choose one (UseProvider). It may list Provider again. Names must be unique.
	Providers []sandbox.Provider
	// Runtime is the default agent runtime (runtime.name): new threads, and threads whose recorded
	// runtime is empty or no longer enabled, run it.
	Runtime runtime.Runtime
	// Runtimes are the further runtimes the deployment enables (runtime.enabled); a thread may choose
	// one (UseRuntime). It may list Runtime again. Names must be unique.
	Runtimes []runtime.Runtime
	Logger   *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Instance names this process in the turns it owns (default: random). Another process takes over
	// its unfinished turns once it is no longer alive (db.Locker.InstanceAlive).
	Instance string
	// Restore rebuilds a recorded turn's request, sink included, from its Delivery, so that a turn
	// taken over from a dead process can be answered. Without it such turns fail with a log line.
	Restore func(ctx context.Context, t db.Turn) (Request, error)
	// RecoverCommands, when set, answers the recorded chat commands no live process is answering
	// (the bot's durable command replies); each recovery pass calls it after the turns. isAlive
	// reports whether a process instance lives. It returns how many it answered.
	RecoverCommands func(ctx context.Context, isAlive func(owner string) (bool, error)) (int, error)
	// Workspace, when set, fills each sandbox before the agent works in it (a repository).
	Workspace Workspace
	// Metrics receives what the pool does (default NopMetrics).
	Metrics Metrics
}

// Pool runs turns, one at a time per thread.
type Pool struct {
	cfg   Config
	store db.Store
	// provs are the enabled sandbox providers, the default among them.
	provs *providerSet
	// rts are the enabled agent runtimes, the default among them.
	rts *runtimeSet
	log *zap.Logger
	now func() time.Time
	met Metrics

	// life owns every session transition.
	life *lifecycle

	// stop cancels every running turn; it is the queues' base context.
	stop context.CancelFunc
	q    *queues

	instance string
	// held records and starts a turn in one commit, where the store can (startAtIntake).
	held heldIntake
	// intakeTimeout bounds recording a turn at intake (intake.go; a field so tests can shorten it).
	intakeTimeout time.Duration
	// writeRetryFor bounds retryWrite (retryWriteFor; a field so tests can shorten it).
	writeRetryFor time.Duration
	restore       func(ctx context.Context, t db.Turn) (Request, error)
	recoverCmds   func(ctx context.Context, isAlive func(owner string) (bool, error)) (int, error)
	capa          *capacity
	starts        *startGate
	ws            Workspace

	// instMu protects the following.
	instMu   sync.Mutex
	instHold db.Hold

	// ownMu protects own, the turns this process holds in memory (adopt.go).
	ownMu sync.Mutex
	own   ownTurns

	// limits remembers each sandbox's last limit reading.
	limits limitState
}

// Lifecycle defaults (lifecycle.max_resume_failures, lifecycle.provider_wait).
const (
	DefaultMaxResumeFailures = 2
	DefaultProviderWait      = 2 * time.Minute
)

// New builds a pool.
func New(cfg Config, deps Deps) (*Pool, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Provider == nil || deps.Runtime == nil {
		return nil, errors.New("agentpool: Store, Provider and Runtime are required")
	}
	provs, err := newProviderSet(deps.Provider, deps.Providers)
	if err != nil {
		return nil, err
	}
	rts, err := newEnabledSet("Runtime", deps.Runtime, deps.Runtimes)
	if err != nil {
		return nil, err
	}
	base, stop := context.WithCancel(context.Background())
	p := &Pool{
		cfg: cfg, store: deps.Store, provs: provs, rts: rts,
		log: cmp.Or(deps.Logger, zap.NewNop()).Named("agentpool"), now: deps.Now,
		stop: stop, q: newQueues(base), instance: deps.Instance, restore: deps.Restore, recoverCmds: deps.RecoverCommands, ws: deps.Workspace,
	}
	if p.instance == "" {
		p.instance = newInstanceID()
	}
	p.held, _ = deps.Store.(heldIntake)
	p.intakeTimeout = intakeTimeout
	p.writeRetryFor = retryWriteFor
	p.q.onPanic = func(v any, stack []byte) {
		p.log.Error("a job on a thread's queue panicked; the thread goes on with its next one",
			zap.Any("panic", v), zap.ByteString("stack", stack))
	}
	if cfg.MaxActive > 0 {
		p.capa = newCapacity(cfg.MaxActive)
	}
	p.starts = newStartGate(cfg.StartConcurrency, startHold)
	if p.now == nil {
		p.now = time.Now
	}
	p.met = deps.Metrics
	if p.met == nil {
		p.met = NopMetrics{}
	}
	p.life = &lifecycle{
		store: p.store, provs: p.provs, log: p.log, spec: p.spec,
		maxResumeFailures: cfg.MaxResumeFailures, providerWait: cfg.ProviderWait,
	}
	return p, nil
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

// Request is one message for a thread.
type Request struct {
	ThreadKey string
	Platform  string
	ChannelID string
	UserID    string
	// UserName is the sender's display name, when the adapter knew it (commit identity).
	UserName string
	// EventID is the platform's id for the message; a second Submit with the same id is refused with
	// db.ErrDuplicate (Slack retries, Discord replays).
	EventID string
	Text    string
	// Files are attachments, copied into the sandbox's input/ before the prompt.
	Files []InboundFile
	Sink  Sink
	// Delivery is where the reply goes, recorded with the turn (opaque JSON from the bot) so another
	// process can answer it if this one dies.
	Delivery json.RawMessage
	// Context, when set, reads what the chat thread said before this message; it is called only on
	// the thread's first turn, when the turn runs (chatcontext.go).
	Context func(ctx context.Context) (ChatContext, error)
}

// InboundFile is an attachment from the user. Its bytes are read only when the turn runs (from a
// spool file, or the platform), so queued turns hold no attachment in memory.
type InboundFile struct {
	Name string
	// Size is the announced size; Open's reader is cut (and the copy refused) past MaxInboundFile.
	Size int64
	Open func(ctx context.Context) (io.ReadCloser, error)
	// Discard, when set, frees what holds the file until it is read (a spool file). The pool owns a
	// submitted turn's files: it calls Discard when the turn ends here, read or not (discardFiles).
	Discard func()
}

// discardFiles frees a turn's attachments once no run of it here can read them: it ended (answered,
// failed before opening them, dropped by a reset). Not for a turn left to the next process (a drop at
// shutdown, one another process claimed): that process opens the files by reference.
func discardFiles(files []InboundFile) {
	for _, f := range files {
		if f.Discard != nil {
			f.Discard()
		}
	}
}

// MaxInboundFile caps one attachment copied into a sandbox.
const MaxInboundFile = 256 << 20

// Ticket says where a submitted turn stands.
type Ticket struct {
	TurnID int64
	// Ahead is how many turns of the same thread run or wait before this one.
	Ahead int
}

// Submit records the turn and queues it on its thread. It returns db.ErrDuplicate for an event seen
// before, and ErrClosed if Shutdown had begun before the turn was recorded (one recorded as it
// begins stays queued for the next process, and Submit accepts it).
func (p *Pool) Submit(ctx context.Context, req Request) (Ticket, error) {
	if req.ThreadKey == "" || req.EventID == "" {
		return Ticket{}, fmt.Errorf("agentpool: submit: %w: thread key and event id are required", db.ErrInvalid)
	}
	if req.Sink == nil {
		req.Sink = NopSink{}
	}
	// The place is taken before the turn is recorded and filled by the add: a check here and an add
	// after the store's write let concurrent submits to one thread all pass the cap.
	place, ok := p.q.reserve(req.ThreadKey, p.cfg.MaxQueued)
	if !ok {
		return Ticket{}, fmt.Errorf("agentpool: submit: %w (%d)", ErrQueueFull, p.cfg.MaxQueued)
	}
	defer place.release()
	if p.q.isClosed() {
		return Ticket{}, ErrClosed
	}
	if err := p.holdInstance(ctx); err != nil {
		return Ticket{}, fmt.Errorf("agentpool: submit: %w", err)
	}
	// Until the turn is queued, AdoptPass must not take it for an orphan.
	p.beginIntake(req.EventID)
	defer p.endIntake(req.EventID)
	if tk, err, taken := p.startAtIntake(ctx, place, req); taken {
		return tk, err
	}
	t, err := p.store.TurnInsert(ctx, p.newTurn(req))
	if errors.Is(err, db.ErrDuplicate) {
		if tk, ok := p.adoptRedelivered(ctx, req); ok {
			return tk, nil
		}
	}
	if err != nil {
		return Ticket{}, fmt.Errorf("agentpool: submit: %w", err)
	}
	ahead, err := p.enqueueTurnInto(place, req, t.ID)
	if err != nil {
		// Closed between the check above and here. The turn is recorded: refused now, the platform
		// would deliver the message again, as a duplicate of the recorded event, which is ignored,
		// and nobody would answer it. Like a queued turn at shutdown (dropTurn), it stays queued and
		// ours: the next process takes it over and answers it.
		p.log.Info("recorded a turn as shutdown began; the next process answers it",
			zap.Int64("turn", t.ID), zap.String("thread", req.ThreadKey))
		return Ticket{TurnID: t.ID}, nil
	}
	return Ticket{TurnID: t.ID, Ahead: ahead}, nil
}

// enqueueTurn queues a recorded turn on its thread.
func (p *Pool) enqueueTurn(req Request, turnID int64) (int, error) {
	return p.enqueueTurnInto(nil, req, turnID)
}

// enqueueTurnInto is enqueueTurn filling place, a slot Submit reserved (nil: none).
func (p *Pool) enqueueTurnInto(place *slot, req Request, turnID int64) (int, error) {
	// Counted before the add: the queue may start the turn before add returns.
	p.met.TurnQueued(1)
	queuedAt := p.now()
	// The sink is the bot's code: a panic in it must cost this turn its post, not the process.
	req.Sink = p.guardSink(req.Sink)
	// Held from here until its run or drop ends, so that AdoptPass never queues it a second time.
	p.reserveTurn(turnID, req.EventID, false)
	ahead, err := p.q.addInto(place, req.ThreadKey, turnID,
		func(ctx context.Context) {
			defer p.releaseTurn(turnID)
			p.met.TurnQueued(-1)
			p.runTurn(ctx, req, turnID, queuedAt)
		},
		func(reason error) {
			defer p.releaseTurn(turnID)
			p.met.TurnQueued(-1)
			p.dropTurn(req, turnID, reason)
		},
	)
	if err != nil {
		p.releaseTurn(turnID)
		p.met.TurnQueued(-1)
	}
	return ahead, err
}

// Do runs f on the thread's queue, after the work queued before it, so commands keep their order
// among a thread's messages. drop is called instead if the queue is cleared or closed first.
func (p *Pool) Do(threadKey string, f func(ctx context.Context), drop func(reason error)) error {
	if drop == nil {
		drop = func(error) {}
	}
	_, err := p.q.add(threadKey, 0, f, drop)
	return err
}

// Depth is how many turns of the thread are running or queued.
func (p *Pool) Depth(threadKey string) int { return p.q.depth(threadKey) }

// Busy is how many threads have a turn running or queued (each holds one goroutine).
func (p *Pool) Busy() int { return p.q.activeKeys() }

// Cancel stops the thread's running turn (turns queued behind it still run). It reports whether a turn
// was running. Other work running on the thread's queue (a reset, a provider or runtime move, an admin
// job) is left to finish: it reports false then.
func (p *Pool) Cancel(threadKey string) bool { return p.q.cancelRunning(threadKey, 0, ErrCancelled) }

// CancelTurn stops one turn, if it is the one running on its thread in this process, with cause (the
// watchdog passes ErrStuck). It never touches another turn of the thread.
func (p *Pool) CancelTurn(threadKey string, turnID int64, cause error) bool {
	return p.q.cancelRunning(threadKey, turnID, cause)
}

// Draining reports whether the pool has stopped taking turns (admin drain, or shutdown).
func (p *Pool) Draining() bool { return p.q.isClosed() }

// Shutdown stops taking turns and lets the running and queued ones finish until ctx ends; then it
// cancels what is left and waits for it to wind down. It never destroys sandboxes: they are paused by
// the idle loop or picked up again by the next pool.
func (p *Pool) Shutdown(ctx context.Context) error {
	p.q.close(true, ErrClosed)
	err := p.q.wait(ctx)
	if err != nil {
		// Grace is over: cancel what runs, and tell the queued turns' users, all at once and bounded,
		// so a slow chat API cannot hold the process past its termination grace.
		drops := p.q.close(false, ErrClosed)
		p.stop()
		wctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		var wg sync.WaitGroup
		for _, d := range drops {
			wg.Go(d)
		}
		doneDrops := make(chan struct{})
		go func() { wg.Wait(); close(doneDrops) }()
		select {
		case <-doneDrops:
		case <-wctx.Done():
		}
		_ = p.q.wait(wctx) // the cancelled turns record themselves
	}
	p.stop()
	p.releaseInstance()
	return err
}

// dropTimeout bounds the wind-down after the grace: recording and reporting cancelled turns.
const dropTimeout = 10 * time.Second

// dropTurn reports a queued turn discarded unrun (shutdown, or a reset of its thread). At shutdown
// the turn is left queued, and owned by this instance: once this process has gone, the next one (or
// a live replica) takes it over and answers it, so a restart loses no message.
func (p *Pool) dropTurn(req Request, turnID int64, reason error) {
	if errors.Is(reason, ErrClosed) {
		return
	}
	if !p.finishQuietly(turnID, db.TurnResult{Status: db.TurnCancelled, Error: reason.Error()}) {
		return // another process's now: it answers
	}
	discardFiles(req.Files)
	ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
	defer cancel()
	_, _ = req.Sink.Deliver(ctx, Outcome{TurnID: turnID, Cancelled: true, Err: reason})
}

// finishQuietly records the end of a turn this process holds, when nothing else can be done about a
// failure to record it. It reports false if another process has claimed the turn (and answers it).
func (p *Pool) finishQuietly(turnID int64, r db.TurnResult) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.Owner = p.instance
	_, err := p.store.TurnFinish(ctx, turnID, r)
	switch {
	case errors.Is(err, db.ErrNotOwner):
		return false
	case err != nil && !errors.Is(err, db.ErrConflict):
		p.log.Warn("recording turn end", zap.Int64("turn", turnID), zap.Error(err))
	}
	// These ends are told by their caller, or have no one to tell: nothing to redeliver.
	p.markDelivered(ctx, turnID)
	return true
}

// settleDelivery records how posting turn turnID's outcome went (Sink.Deliver's err; the turn
// ended at finished). A reply that did not reach the chat at all (ErrNotPosted) is left
// undelivered while it is recent, for the adoption pass to post again; anything else is recorded
// as delivered, failed posts included (logged), so nothing is posted twice.
// It reports whether the turn is to be recorded as delivered (its mark may have failed).
func (p *Pool) settleDelivery(ctx context.Context, turnID int64, finished time.Time, err error) bool {
	if err != nil {
		p.log.Warn("posting a turn's reply", zap.Int64("turn", turnID), zap.Error(err))
	}
	if errors.Is(err, ErrNotPosted) && p.now().Sub(finished) < RepostFor {
		p.log.Warn("the reply did not reach the chat; posting it again later", zap.Int64("turn", turnID))
		return false
	}
	p.markDelivered(ctx, turnID)
	return true
}

// markDelivered records that a turn's outcome was posted, so recovery never posts it again.
func (p *Pool) markDelivered(ctx context.Context, turnID int64) {
	if err := p.retryWrite(ctx, func(ctx context.Context) error { return p.store.TurnMarkDelivered(ctx, turnID) }); err != nil {
		p.log.Warn("recording delivery", zap.Int64("turn", turnID), zap.Error(err))
	}
}

// retryWrite runs write, a write recording a turn's end or delivery, again while it fails for a
// reason other than the turn's state (a lost connection, a failover), for up to p.writeRetryFor
// and within ctx. Once a turn is answered, a lost write is a second answer later: recovery would
// find it running (and say it was interrupted, inviting the user to run it again) or undelivered
// (and post it again). Writes are idempotent or fenced, so one that committed unseen ends in a
// conflict. A turn's end that still fails is remembered and written by the adoption pass
// (adopt_orphans.go).
func (p *Pool) retryWrite(ctx context.Context, write func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.writeRetryFor)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		err := write(ctx)
		if err == nil || errors.Is(err, db.ErrConflict) || errors.Is(err, db.ErrNotFound) || errors.Is(err, db.ErrInvalid) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// retryWriteFor bounds retryWrite.
const retryWriteFor = 20 * time.Second
