package agentpool

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// LimitKind names a sandbox limit a turn can hit.
type LimitKind string

const (
	LimitMemory LimitKind = "memory"
	LimitDisk   LimitKind = "disk"
)

// LimitError ends a turn that hit a sandbox limit: the memory limit (the kernel killed a process of
// the sandbox) or the disk quota on the work directory. The bot renders it for the user.
type LimitError struct {
	Kind LimitKind
	// LimitMB is the limit (sandbox.resources.memory_mb or disk_mb).
	LimitMB int
	// UsedKB is what the work directory uses (disk only).
	UsedKB int64
	// Stopped: the quota check stopped the turn while it ran (disk only).
	Stopped bool
}

func (e *LimitError) Error() string {
	if e.Kind == LimitMemory {
		return fmt.Sprintf("hit the %d MiB memory limit", e.LimitMB)
	}
	return fmt.Sprintf("the work directory uses %d MiB, over the %d MiB disk limit", e.UsedKB>>10, e.LimitMB)
}

// DefaultLimitCheckInterval is how often the work directory is measured while a turn runs.
const DefaultLimitCheckInterval = 5 * time.Second

// limitProbe is one shell line the sandbox's own tools run (busybox or coreutils): the work directory's
// size in KiB (du -sk, from the exec's working directory), and the memory cgroup's count of processes
// the kernel killed for memory (cgroup v2 memory.events, or v1 memory.oom_control; kernel ≥ 4.13).
// Exit codes 137 look the same whether the kernel, a user or a timeout sent the SIGKILL; this count
// does not.
// The start time of the sandbox's PID 1 tells a restart (a resume), which resets the count.
const limitProbe = `printf 'disk_kb %s\n' "$(du -sk . 2>/dev/null | cut -f1)"; ` +
	`cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null | grep '^oom_kill '; ` +
	`printf 'started %s\n' "$(cut -d' ' -f22 /proc/1/stat 2>/dev/null)"; true`

// limitReading is what one probe found; -1 where it could not tell.
type limitReading struct {
	diskKB, oomKills int64
	// started is when the sandbox's PID 1 started (clock ticks since boot); "" when unknown.
	started string
}

// limitState remembers, per sandbox, the last reading, so a warm turn needs no probe before it runs.
//
// Sandboxes come and go (recreated, destroyed) without telling it, so readings are dropped once a
// day old, swept every limitSweepEvery stores: what it holds is bounded by the sandboxes that ran a
// turn in the last day, not by every sandbox the process ever saw. A dropped reading of a sandbox
// still in use costs one probe.
type limitState struct {
	mu     sync.Mutex // protects the following
	last   map[string]timedReading
	stores int
}

type timedReading struct {
	r  limitReading
	at time.Time
}

// Limit reading bounds.
const (
	limitReadingTTL = 24 * time.Hour
	limitSweepEvery = 1024
)

func (s *limitState) load(id string) (limitReading, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.last[id]
	return t.r, ok
}

// store records id's reading taken at now, sweeping the day-old ones every limitSweepEvery calls.
func (s *limitState) store(id string, r limitReading, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]timedReading{}
	}
	s.last[id] = timedReading{r: r, at: now}
	if s.stores++; s.stores%limitSweepEvery == 0 {
		for k, t := range s.last {
			if now.Sub(t.at) > limitReadingTTL {
				delete(s.last, k)
			}
		}
	}
}

// len is how many readings are held.
func (s *limitState) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.last)
}

func (p *Pool) probeLimits(ctx context.Context, sb sandbox.Sandbox) (limitReading, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"sh", "-c", limitProbe}, Stdout: &out, Timeout: 30 * time.Second})
	if err != nil {
		return limitReading{}, err
	}
	if res.ExitCode != 0 {
		return limitReading{}, fmt.Errorf("limit probe exited %d", res.ExitCode)
	}
	r := limitReading{diskKB: -1, oomKills: -1}
	for line := range strings.Lines(out.String()) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if f[0] == "started" {
			r.started = f[1]
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "disk_kb":
			r.diskKB = n
		case "oom_kill":
			r.oomKills = n
		}
	}
	return r, nil
}

// limitWatch checks one prompt against the sandbox's limits: the disk quota every
// Config.LimitCheckInterval while it runs, and both limits once it is over.
type limitWatch struct {
	p       *Pool
	sb      sandbox.Sandbox
	base    limitReading
	cancel  context.CancelCauseFunc
	done    chan struct{}
	stopped sync.WaitGroup
	// hit is the LimitError that stopped the prompt, if any (written before cancel, read after stop).
	hit *LimitError
}

// watchLimits starts watching a prompt. It returns the context to run the prompt under, which is
// cancelled with a *LimitError when the work directory grows past the disk quota. With
// Config.EnforceLimits off it changes nothing.
func (p *Pool) watchLimits(ctx context.Context, sb sandbox.Sandbox, created bool) (context.Context, *limitWatch) {
	if !p.cfg.EnforceLimits {
		return ctx, nil
	}
	w := &limitWatch{p: p, sb: sb, done: make(chan struct{})}
	switch last, ok := p.limits.load(sb.Handle().ID); {
	case created:
		w.base = limitReading{}
	case ok:
		w.base = last
	default:
		// The first turn on this sandbox in this process: learn where it starts from.
		r, err := p.probeLimits(ctx, sb)
		if err != nil {
			p.log.Debug("limit probe before the turn", zap.Error(err))
			r = limitReading{diskKB: -1, oomKills: -1}
		}
		w.base = r
	}
	ctx, w.cancel = context.WithCancelCause(ctx)
	if p.cfg.Resources.DiskMB > 0 {
		w.stopped.Go(func() { w.pollDisk(ctx) })
	}
	return ctx, w
}

// allowedKB is the disk a turn may use: the quota, or what the sandbox already used when the turn
// began, so that a turn started over the quota can clean up but not grow.
func (w *limitWatch) allowedKB() int64 {
	return max(int64(w.p.cfg.Resources.DiskMB)<<10, w.base.diskKB)
}

func (w *limitWatch) pollDisk(ctx context.Context) {
	t := time.NewTicker(w.p.cfg.LimitCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, err := w.p.probeLimits(ctx, w.sb)
		if err != nil || r.diskKB < 0 {
			continue
		}
		if r.diskKB > w.allowedKB() {
			w.hit = &LimitError{Kind: LimitDisk, LimitMB: w.p.cfg.Resources.DiskMB, UsedKB: r.diskKB, Stopped: true}
			w.cancel(w.hit)
			return
		}
	}
}

// finish stops the polling and measures once more. It returns a *LimitError when the prompt was
// stopped for disk, when a process of the sandbox was killed for memory during it, or when the work
// directory is over the quota now.
func (w *limitWatch) finish(ctx context.Context) error {
	if w == nil {
		return nil
	}
	close(w.done)
	w.stopped.Wait()
	w.cancel(nil)
	// The turn's own context may be what ended; the verdict still needs its probe.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r, err := w.p.probeLimits(pctx, w.sb)
	if err != nil {
		w.p.log.Debug("limit probe after the turn", zap.Error(err))
		if w.hit != nil {
			return w.hit
		}
		return nil
	}
	w.p.limits.store(w.sb.Handle().ID, r, w.p.now())
	limit := w.p.cfg.Resources
	baseOOM := w.base.oomKills
	if w.base.started != "" && w.base.started != r.started {
		baseOOM = 0 // restarted (paused and resumed) since: a new cgroup counts from zero
	}
	switch {
	case r.oomKills >= 0 && baseOOM >= 0 && r.oomKills > baseOOM:
		return &LimitError{Kind: LimitMemory, LimitMB: limit.MemoryMB}
	case w.hit != nil:
		w.hit.UsedKB = max(w.hit.UsedKB, r.diskKB)
		return w.hit
	case limit.DiskMB > 0 && r.diskKB > int64(limit.DiskMB)<<10:
		return &LimitError{Kind: LimitDisk, LimitMB: limit.DiskMB, UsedKB: r.diskKB}
	}
	return nil
}
