package agentpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// MaintainerConfig configures the background loops (DESIGN §6 "Loops"). Zero fields take the
// defaults below; negative ones are refused by NewMaintainer.
type MaintainerConfig struct {
	// IdleTimeout pauses an active session with no activity for this long (lifecycle.idle_timeout,
	// default 15m).
	IdleTimeout time.Duration
	// PausedTTL destroys a session paused for this long (lifecycle.paused_ttl, default 72h).
	PausedTTL time.Duration
	// ReapGrace is how old a sandbox no live session owns must be before the reaper destroys it
	// (lifecycle.reap_grace, default 10m). It covers the window between a provider's Create and the
	// resolver saving the new handle.
	ReapGrace time.Duration
	// StuckAfter aborts a running turn with no runtime event for this long (lifecycle.stuck_after,
	// default 10m).
	StuckAfter time.Duration
	// ReconcileGrace is how long a session may sit in creating, resuming, pausing, destroying or
	// error before the reconcile pass drives it to a stable state (lifecycle.reconcile_grace, default
	// 5m). A turn working on the session holds its lock, so the grace only delays the cleanup after a
	// crash or a failed call.
	ReconcileGrace time.Duration
	// Interval is how often the leader runs each pass, and how often a follower asks for leadership
	// (default 1m).
	Interval time.Duration
	// PassTimeout bounds one pass (default 30s), so a hung provider cannot stall the loops.
	PassTimeout time.Duration
	// BatchSize is how many rows one query of a pass returns (default 100, at most db.MaxBatch).
	BatchSize int
	// ReapDryRun makes the reaper report orphans without destroying them.
	ReapDryRun bool
}

// Maintainer defaults.
const (
	DefaultIdleTimeout = 15 * time.Minute
	DefaultPausedTTL   = 72 * time.Hour
	DefaultReapGrace   = 10 * time.Minute
	DefaultStuckAfter  = 10 * time.Minute
	// DefaultReconcileGrace is lifecycle.reconcile_grace's default.
	DefaultReconcileGrace = 5 * time.Minute
	DefaultInterval       = time.Minute
	DefaultPassTimeout    = 30 * time.Second
)

func (c MaintainerConfig) withDefaults() MaintainerConfig {
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.PausedTTL = cmp.Or(c.PausedTTL, DefaultPausedTTL)
	c.ReapGrace = cmp.Or(c.ReapGrace, DefaultReapGrace)
	c.StuckAfter = cmp.Or(c.StuckAfter, DefaultStuckAfter)
	c.ReconcileGrace = cmp.Or(c.ReconcileGrace, DefaultReconcileGrace)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.PassTimeout = cmp.Or(c.PassTimeout, DefaultPassTimeout)
	c.BatchSize = cmp.Or(c.BatchSize, db.DefaultBatch)
	return c
}

// validate names the field, and the config key where there is one, so the message says what to fix.
func (c MaintainerConfig) validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"IdleTimeout (lifecycle.idle_timeout)", c.IdleTimeout},
		{"PausedTTL (lifecycle.paused_ttl)", c.PausedTTL},
		{"ReapGrace (lifecycle.reap_grace)", c.ReapGrace},
		{"StuckAfter (lifecycle.stuck_after)", c.StuckAfter},
		{"ReconcileGrace (lifecycle.reconcile_grace)", c.ReconcileGrace},
		{"Interval", c.Interval},
		{"PassTimeout", c.PassTimeout},
	} {
		if f.d <= 0 {
			return fmt.Errorf("agentpool: maintainer %s = %s: must be positive", f.name, f.d)
		}
	}
	if c.BatchSize <= 0 || c.BatchSize > db.MaxBatch {
		return fmt.Errorf("agentpool: maintainer BatchSize = %d: must be between 1 and %d", c.BatchSize, db.MaxBatch)
	}
	return nil
}

// MaintainerDeps are the Maintainer's collaborators.
type MaintainerDeps struct {
	Store db.Store
	// Provider is the default provider and Providers the further enabled ones, as in Deps: the loops
	// and the reaper cover all of them, and one that is down does not stop the others' passes.
	Provider  sandbox.Provider
	Providers []sandbox.Provider
	// Deployment is this deployment's label value (sandbox.LabelDeployment). Required: the reaper
	// only ever considers sandboxes carrying it.
	Deployment string
	Logger     *zap.Logger
	// Now is the clock every cutoff is computed from (default time.Now). Tickers use real time.
	Now func() time.Time
	// OnStuck, if set, is called by the watchdog before it fails a stuck turn, so that the pool can
	// cancel the turn if it is running it. It must not block for long: it runs inside the pass.
	OnStuck func(ctx context.Context, t db.Turn)
	// Instance is the owner id of this process's turns (Pool.Instance). The watchdog ends stuck turns
	// of this instance and of dead ones only; without it, only dead owners' turns.
	Instance string
	// Recover, if set, runs first in every round: it takes over the unfinished turns of dead
	// processes (Pool.RecoverPass).
	Recover func(ctx context.Context) (RecoverReport, error)
	// Metrics receives leadership and what every pass did (default NopMetrics).
	Metrics Metrics
}

// Maintainer runs the leader-only loops: idle-pause, cleanup, the orphan reaper and the stuck-turn
// watchdog. Each pass is also exported, for admin commands and tests.
//
// Every change to a session is made holding Store.LockThread, the lock a turn holds for its whole run,
// and re-checks the row after taking it; so a loop never pauses or destroys a sandbox under a turn.
type Maintainer struct {
	cfg        MaintainerConfig
	store      db.Store
	provs      *providerSet
	deployment string
	log        *zap.Logger
	now        func() time.Time
	onStuck    func(context.Context, db.Turn)
	instance   string
	recover    func(context.Context) (RecoverReport, error)
	met        Metrics
	// life makes every session transition, as for turns and admin commands. It never creates, and
	// never waits out a provider outage: a pass fails the item and the next pass retries it.
	life *lifecycle
	// outage remembers the providers found down, so an outage is logged once, not on every pass.
	outage outages

	// lockWait is how long a pass waits for a thread's lock before it counts the thread as busy: a
	// turn holds the lock for its whole run, and waiting for it would stall the pass behind it.
	lockWait time.Duration
	// afterPass is a test hook: Run calls it after every pass, with the pass's name.
	afterPass func(name string)
}

// NewMaintainer validates cfg (after defaults) and deps.
func NewMaintainer(cfg MaintainerConfig, deps MaintainerDeps) (*Maintainer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch {
	case deps.Store == nil:
		return nil, errors.New("agentpool: maintainer: Store is required")
	case deps.Provider == nil:
		return nil, errors.New("agentpool: maintainer: Provider is required")
	case deps.Deployment == "":
		return nil, errors.New("agentpool: maintainer: Deployment is required (the reaper only touches its own deployment's sandboxes)")
	}
	provs, err := newProviderSet(deps.Provider, deps.Providers)
	if err != nil {
		return nil, fmt.Errorf("agentpool: maintainer: %w", err)
	}
	m := &Maintainer{
		cfg:        cfg,
		store:      deps.Store,
		provs:      provs,
		deployment: deps.Deployment,
		log:        cmp.Or(deps.Logger, zap.NewNop()).Named("maintainer"),
		now:        deps.Now,
		onStuck:    deps.OnStuck,
		instance:   deps.Instance,
		recover:    deps.Recover,
		lockWait:   250 * time.Millisecond,
		met:        cmp.Or[Metrics](deps.Metrics, NopMetrics{}),
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.life = &lifecycle{store: m.store, provs: m.provs, log: m.log}
	return m, nil
}

// Config returns the configuration in effect, defaults filled in.
func (m *Maintainer) Config() MaintainerConfig { return m.cfg }

// Pass names, used as logger names and by the test hook.
const (
	passWatchdog  = "watchdog"
	passIdle      = "idle-pause"
	passCleanup   = "cleanup"
	passReconcile = "reconcile"
	passReaper    = "reaper"
	passRecover   = "recover"
)

// Run runs the loops until ctx ends. It asks for leadership every Interval; while it leads, it runs
// every pass at once and then on each tick. When leadership is lost (the database connection that
// held it died, so another process may lead already) the running pass is cancelled and Run goes back
// to asking. Leadership is released when Run returns. Run never destroys anything on its way out.
func (m *Maintainer) Run(ctx context.Context) {
	retry := time.NewTicker(m.cfg.Interval)
	defer retry.Stop()
	failing := false
	for {
		l, ok, err := m.store.TryLeader(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil && !failing {
				m.log.Error("cannot ask for leadership; will retry", zap.Error(err))
			}
			failing = ctx.Err() == nil
		default:
			if failing {
				m.log.Info("leadership query works again")
			}
			failing = false
			if ok {
				m.lead(ctx, l)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
	}
}

// lead runs the passes while l is held, and releases it when ctx ends or leadership is lost.
func (m *Maintainer) lead(ctx context.Context, l db.Leader) {
	defer l.Release()
	m.met.Leading(true)
	defer m.met.Leading(false)
	ctx, cancel := context.WithCancel(ctx)
	// The watcher turns loss of leadership into cancellation, so that a pass in flight stops too. It
	// is joined before lead returns: Run leaves no goroutine behind.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(); <-watched }()

	m.log.Info("leading: maintenance loops started")
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	state := map[string]*passState{}
	for {
		for _, p := range m.passes() {
			if ctx.Err() != nil {
				break
			}
			st := state[p.name]
			if st == nil {
				st = &passState{log: m.log.Named(p.name)}
				state[p.name] = st
			}
			pctx, pcancel := context.WithTimeout(ctx, m.cfg.PassTimeout)
			start := time.Now()
			rep, err := p.run(pctx)
			pcancel()
			if ctx.Err() == nil {
				m.met.Pass(p.name, rep, time.Since(start), err)
			}
			st.observe(ctx, rep, err)
			if m.afterPass != nil {
				m.afterPass(p.name)
			}
		}
		select {
		case <-ctx.Done():
			select {
			case <-l.Lost():
				m.log.Warn("leadership lost: maintenance loops stopped until it is regained")
			default:
			}
			return
		case <-tick.C:
		}
	}
}

type maintPass struct {
	name string
	run  func(ctx context.Context) (PassReport, error)
}

func (m *Maintainer) passes() []maintPass {
	var ps []maintPass
	if m.recover != nil {
		ps = append(ps, maintPass{passRecover, func(ctx context.Context) (PassReport, error) {
			r, err := m.recover(ctx)
			done := r.Requeued + r.Interrupted + r.Redelivered + r.Commands
			return PassReport{Found: done + r.Failed, Done: done, Failed: r.Failed}, err
		}})
	}
	return append(ps, []maintPass{
		{passWatchdog, m.WatchdogPass},
		{passIdle, m.IdlePass},
		{passCleanup, m.CleanupPass},
		{passReconcile, m.ReconcilePass},
		{passReaper, func(ctx context.Context) (PassReport, error) {
			r, err := m.ReapPass(ctx, m.cfg.ReapDryRun)
			return r.passReport(), err
		}},
	}...)
}

// passState remembers whether a pass was failing, so that a persistent error is logged when it
// starts and when it ends, not once a minute.
type passState struct {
	log     *zap.Logger
	failing bool
	// itemsFailing: the last pass ended with items failed (a provider outage fails every item of
	// its sessions, pass after pass).
	itemsFailing bool
}

func (s *passState) observe(ctx context.Context, rep PassReport, err error) {
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // shutting down or leadership lost: not news
		}
		if !s.failing {
			s.log.Error("pass failed; will retry", zap.Error(err), zap.Object("report", rep))
		} else {
			s.log.Debug("pass still failing", zap.Error(err))
		}
		s.failing = true
		return
	}
	if s.failing {
		s.log.Info("pass works again")
		s.failing = false
	}
	switch {
	case rep.Failed > 0 && !s.itemsFailing:
		s.itemsFailing = true
		s.log.Warn("pass done with failures", zap.Object("report", rep), zap.Errors("errors", rep.Errors))
	case rep.Failed > 0:
		s.log.Debug("pass done, still with failures", zap.Object("report", rep), zap.Errors("errors", rep.Errors))
	case s.itemsFailing:
		s.itemsFailing = false
		s.log.Info("pass done without failures again", zap.Object("report", rep))
	case rep.Done > 0:
		s.log.Info("pass done", zap.Object("report", rep))
	case rep.Found > 0:
		s.log.Debug("pass done, nothing changed", zap.Object("report", rep))
	}
}

// PassReport is what one pass did.
type PassReport struct {
	// Found is how many candidates the pass's queries returned (each counted once).
	Found int
	// Done is how many it handled: sessions paused or destroyed, turns aborted, orphans destroyed
	// (or, in a dry run, reported).
	Done int
	// Skipped were left for a later pass: the thread was busy with a turn, or the row changed under
	// the pass.
	Skipped int
	// Failed is how many hit a provider or store error; the pass went on with the others. Errors
	// holds the first few.
	Failed int
	Errors []error
}

// maxReportErrors bounds PassReport.Errors: the count says how many there were.
const maxReportErrors = 10

func (r *PassReport) fail(err error) {
	r.Failed++
	if len(r.Errors) < maxReportErrors {
		r.Errors = append(r.Errors, err)
	}
}

// MarshalLogObject implements zapcore.ObjectMarshaler, so passes log their counts compactly.
func (r PassReport) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("found", r.Found)
	enc.AddInt("done", r.Done)
	enc.AddInt("skipped", r.Skipped)
	enc.AddInt("failed", r.Failed)
	return nil
}

// humanDuration prints 10m rather than 10m0s, for messages users read.
func humanDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
