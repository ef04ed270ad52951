package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/cmd/threadbox/metrics"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/prompts"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/local"
)

// app is everything serve (and the admin CLI) runs on, built explicitly: no init registration.
type app struct {
	store db.Store
	// provs are the enabled sandbox providers (sandbox.providers), the default first. There is no
	// single provider field any more: wrappers that serve Docker sandboxes only (the gateway) go
	// through wrapDocker.
	provs []sandbox.Provider
	// rts are the enabled agent runtimes (runtime.enabled), the default first, each wrapped by the
	// gateway when it runs.
	rts     []runtime.Runtime
	pool    *agentpool.Pool
	maint   *agentpool.Maintainer
	admin   *bot.Admin
	handler *bot.Handler
	// dir is what the chat adapters read of sessions and histories: they may not import db.
	dir *bot.Directory
	// metrics are this process's instruments, served on /metrics.
	metrics *metrics.Metrics
	// warning is shown prominently (console and page) when the setup is unsafe.
	warning string
	// gw is the model gateway, nil when off; serve mounts it for cloud sandboxes.
	gw *gateway.Gateway
}

// noIsolationWarning is what the bot says when it runs agent commands on the host.
const noIsolationWarning = "NO ISOLATION: no Docker daemon answered, so agent commands run as processes on this machine " +
	"(sandbox.provider local). Do not expose this bot to anyone you would not give a shell."

// buildApp wires the store, provider, runtime, pool, loops and bot core from the config. storeOpts
// add to the store's options (serve warms the database pools).
func (m *Main) buildApp(ctx context.Context, storeOpts ...db.Option) (*app, error) {
	cfg := m.Config
	a := &app{}
	st, err := m.openStore(ctx, storeOpts...)
	if err != nil {
		return nil, err
	}
	a.store = st
	a.metrics = metrics.New(st, m.Logger)
	if err := startSchema(ctx, st, cfg.Database.AutoMigrate, m.Logger); err != nil {
		return nil, err
	}
	if a.provs, a.warning, err = m.newProviders(ctx); err != nil {
		return nil, err
	}
	gw, err := m.newGateway(st, a.dockerOrDefault())
	if err != nil {
		return nil, err
	}
	var wrapRT func(runtime.Runtime) runtime.Runtime
	if gw != nil {
		// Every enabled runtime gets the gateway's per-sandbox tokens, not just the default.
		wrapRT = gw.Runtime
	}
	if a.rts, err = m.newRuntimes(gw, wrapRT); err != nil {
		return nil, err
	}
	eg, err := m.newEgress(a.dockerOrDefault(), a.metrics)
	if err != nil {
		return nil, err
	}
	if eg != nil {
		// Inside the gateway's wrapper: the gateway makes its forwarder the sandbox's main process,
		// and egress adds its relay to that process.
		a.wrapDocker(eg.Provider)
	}
	if gw != nil {
		// The gateway wraps the Docker provider (a bind-mounted socket per sandbox).
		a.wrapDocker(gw.Provider)
		serveClouds(gw, a.provs) // and cloud ones over gateway.public_url
		a.gw = gw
	}
	env, blocked, err := cfg.Sandbox.Env.Resolve(func(k string) (string, bool) {
		v := m.getenv(k)
		return v, v != ""
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox.env: %w", err)
	}
	if len(blocked) > 0 {
		m.Logger.Warn("sandbox.env asks for blocked variables; they are left out", zap.Strings("blocked", blocked))
	}
	network := m.sandboxNetwork()
	readOnly := m.readOnlyRoot()
	if cfg.Sandbox.ReadOnlyRoot && !readOnly {
		m.Logger.Info("sandbox.read_only_root does not apply: an enabled runtime keeps its sessions in the home directory, so the root stays writable",
			zap.String("runtime", m.aiRuntime()))
	}
	ws, err := newWorkspace(cfg.Config, st, m.Logger)
	if err != nil {
		return nil, fmt.Errorf("repos: %w", err)
	}
	a.pool, err = agentpool.New(agentpool.Config{
		Deployment: cfg.Deployment, Image: cfg.Sandbox.Image, Resources: cfg.Sandbox.Resources,
		Network: network, ReadOnlyRoot: readOnly, Env: env, BlockedEnv: cfg.Sandbox.Env.Blocked,
		StuckAfter: cfg.Lifecycle.StuckAfter, MaxQueued: cfg.Lifecycle.MaxQueued, MaxActive: cfg.Sandbox.MaxActive,
		MaxResumeFailures: cfg.Lifecycle.MaxResumeFailures, ProviderWait: cfg.Lifecycle.ProviderWait,
		// disk_mb on the work directory, and memory kills named as such: no provider here caps volumes.
		EnforceLimits: true,
		SystemPrompt:  prompts.System(prompts.SystemData{WorkDir: sandbox.DefaultWorkDir}),
	}, agentpool.Deps{Store: st, Provider: a.provs[0], Providers: a.provs[1:], Runtime: a.rts[0], Runtimes: a.rts[1:], Logger: m.Logger,
		// The handler is built below; turns are restored only once serve has registered the adapters.
		Restore: func(ctx context.Context, t db.Turn) (agentpool.Request, error) { return a.handler.Restore(ctx, t) },
		RecoverCommands: func(ctx context.Context, isAlive func(string) (bool, error)) (int, error) {
			return a.handler.RecoverCommands(ctx, isAlive)
		},
		Workspace: ws,
		Metrics:   a.metrics,
	})
	if err != nil {
		return nil, err
	}
	a.maint, err = agentpool.NewMaintainer(agentpool.MaintainerConfig{
		IdleTimeout: cfg.Lifecycle.IdleTimeout, PausedTTL: cfg.Lifecycle.PausedTTL,
		ReapGrace: cfg.Lifecycle.ReapGrace, StuckAfter: cfg.Lifecycle.StuckAfter,
		Interval:       cfg.Lifecycle.LoopInterval,
		ReconcileGrace: cfg.Lifecycle.ReconcileGrace,
	}, agentpool.MaintainerDeps{
		Store: st, Provider: a.provs[0], Providers: a.provs[1:], Deployment: cfg.Deployment, Logger: m.Logger,
		OnStuck:  func(_ context.Context, t db.Turn) { a.pool.CancelTurn(t.ThreadKey, t.ID, agentpool.ErrStuck) },
		Instance: a.pool.Instance(),
		Recover:  a.pool.RecoverPass,
		Metrics:  a.metrics,
	})
	if err != nil {
		return nil, err
	}
	a.admin = bot.NewAdmin(st, agentpool.Ops{Pool: a.pool, Maint: a.maint}, cfg.Admin.Users, m.Logger).WithMetrics(a.metrics).WithNumbers(a.metrics.Numbers).
		WithRedaction(m.redactor())
	var usage *bot.Usage
	if gw != nil {
		usage = usageView(st, cfg.Gateway)
		a.admin.WithUsage(usage)
	}
	ac := cfg.Access
	a.handler = bot.NewHandler(bot.HandlerConfig{Access: bot.AccessPolicy{
		SlackTeams: ac.SlackTeams, DiscordGuilds: ac.DiscordGuilds, Channels: ac.Channels, Users: ac.Users,
		BlockDMs: !ac.DMs, OwnerOnlyControls: ac.OwnerOnlyControls, RefusalWindow: ac.RefusalWindow,
	}, Metrics: a.metrics, Usage: usage}, a.pool, st, a.admin, m.Logger)
	a.dir = bot.NewDirectory(st).WithRedaction(m.redactor())
	return a, nil
}

// dockerOrDefault is the enabled Docker provider, else the default one: what a Docker-only feature
// (the gateway, egress) checks and wraps.
func (a *app) dockerOrDefault() sandbox.Provider {
	for _, p := range a.provs {
		if p.Name() == docker.Name {
			return p
		}
	}
	return a.provs[0]
}

// wrapDocker replaces the enabled Docker provider, if any, with wrap(it): the gateway (and any other
// wrapper that serves Docker sandboxes only) leaves the other providers as they are.
func (a *app) wrapDocker(wrap func(sandbox.Provider) sandbox.Provider) {
	for i, p := range a.provs {
		if p.Name() == docker.Name {
			a.provs[i] = wrap(p)
		}
	}
}

// newProviders builds every enabled sandbox provider (sandbox.providers), the default
// (sandbox.provider; "auto": Docker if a daemon answers) first. A provider is registered here, by
// name: a new one gets a case in buildProvider and a name in config.Providers.
func (m *Main) newProviders(ctx context.Context) ([]sandbox.Provider, string, error) {
	def, warning, err := m.newProvider(ctx)
	if err != nil {
		return nil, "", err
	}
	out := []sandbox.Provider{def}
	for _, name := range m.Config.Sandbox.EnabledProviders()[1:] {
		if name == def.Name() {
			continue
		}
		p, w, err := m.buildProvider(ctx, name)
		if err != nil {
			return nil, "", fmt.Errorf("sandbox.providers %s: %w", name, err)
		}
		warning = cmp.Or(warning, w)
		out = append(out, p)
	}
	return out, warning, nil
}

// newProvider builds the default sandbox provider ("auto": Docker if a daemon answers).
func (m *Main) newProvider(ctx context.Context) (sandbox.Provider, string, error) {
	name, err := m.chooseProvider(ctx)
	if err != nil {
		return nil, "", err
	}
	return m.buildProvider(ctx, name)
}

// buildProvider builds one provider by name, with the warning to show if its setup is unsafe.
func (m *Main) buildProvider(ctx context.Context, name string) (sandbox.Provider, string, error) {
	cfg := m.Config
	switch name {
	case "docker":
		p, err := docker.New(ctx, docker.Options{Host: cfg.Sandbox.Docker.Host, Deployment: cfg.Deployment, Logger: m.Logger})
		if err != nil {
			return nil, "", err
		}
		m.onClose(p.Close)
		if err := p.CheckImage(ctx, cfg.Sandbox.Image); err != nil {
			return nil, "", fmt.Errorf("sandbox.image: %w (build it with `make sandbox-image`, or set sandbox.image)", err)
		}
		return p, "", nil
	case "local":
		p, err := local.New(local.Options{Dir: cfg.Sandbox.Local.Dir, IUnderstandNoIsolation: cfg.Sandbox.Local.IUnderstandNoIsolation})
		if err != nil {
			return nil, "", err
		}
		m.Logger.Warn(noIsolationWarning)
		fmt.Fprintf(m.Stderr, "\n  *** WARNING: %s ***\n\n", noIsolationWarning)
		return p, noIsolationWarning, nil
	case "daytona":
		p, err := m.newDaytona()
		return p, "", err
	case "deno":
		p, err := m.newDeno()
		if err != nil {
			return nil, "", err
		}
		m.onClose(p.Close)
		m.goSweepDeno(ctx, p)
		return p, "", nil
	}
	return nil, "", fmt.Errorf("sandbox.provider %s: not available in this build yet (use docker, local, daytona or deno)", name)
}

// shutdown stops intake first, then lets turns finish within grace, then closes the rest. It never
// destroys sandboxes: the next start picks them up.
func (a *app) shutdown(log *zap.Logger, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := a.pool.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("pool shutdown", zap.Error(err))
	}
}

// newDaytona builds the Daytona provider from sandbox.daytona (it does not contact Daytona; doctor does).
func (m *Main) newDaytona() (*daytona.Provider, error) {
	d := m.Config.Sandbox.Daytona
	opts := daytona.Options{
		APIURL: d.APIURL, APIKey: d.APIKey, Target: d.Target, Snapshot: d.Snapshot,
		AutoStopMinutes: d.AutoStopMinutes, Deployment: m.Config.Deployment, Logger: m.Logger,
	}
	if d.AutoArchiveMinutes > 0 {
		opts.AutoArchiveMinutes = &d.AutoArchiveMinutes
	}
	if d.AutoDeleteMinutes >= 0 {
		opts.AutoDeleteMinutes = &d.AutoDeleteMinutes
	}
	return daytona.New(opts)
}

// newDeno builds the Deno provider from sandbox.deno (it does not contact Deno; doctor does).
func (m *Main) newDeno() (*deno.Provider, error) {
	d := m.Config.Sandbox.Deno
	return deno.New(deno.Options{
		Token: d.Token, Org: d.Org, ConsoleURL: d.ConsoleURL, SandboxURL: d.SandboxURL, Region: d.Region,
		BaseSnapshot: d.BaseSnapshot, VolumeCapacity: d.VolumeCapacity, Logger: m.Logger,
	})
}

// goSweepDeno runs the Deno provider's sweeper until Close: it pauses this process's idle sandboxes
// before Deno's 30-minute deadline (a turn in progress extends it instead).
func (m *Main) goSweepDeno(ctx context.Context, p *deno.Provider) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.RunSweeper(sctx, time.Minute)
	}()
	m.onClose(func() error {
		cancel()
		<-done
		return nil
	})
}

// startSchema migrates on start, or only checks the schema when auto_migrate is off. A database that
// a newer release migrated is refused (db.ErrSchemaNewer) when that release marked its schema too
// new for this binary (its queries would write rows the newer schema does not expect); when the
// newer migrations are compatible (db.ErrSchemaAhead: a rollback) it warns and goes on.
func startSchema(ctx context.Context, st db.Store, autoMigrate bool, log *zap.Logger) error {
	var err error
	if autoMigrate {
		err = st.Migrate(ctx)
	} else {
		err = st.CheckSchema(ctx)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, db.ErrSchemaAhead):
		log.Warn("database schema is ahead of this binary (rolled back?); running on it", zap.Error(err))
		return nil
	case errors.Is(err, db.ErrSchemaNewer), !autoMigrate:
		return err // skipping the migration would not help
	}
	return fmt.Errorf("migrate on start (set database.auto_migrate: false to skip): %w", err)
}
