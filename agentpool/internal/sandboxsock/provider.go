package sandboxsock

import (
	"context"
	"errors"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// Fit adapts a sandbox's spec to its socket directory dir (mounts, command, environment). An error
// means the sandbox must not be made.
type Fit func(spec sandbox.Spec, dir string) (sandbox.Spec, error)

// Wrap returns p with the set's sockets kept in step with its sandboxes: Create serves the new
// sandbox's socket and lets fit mount it; Inspect and Start serve it again (after a bot restart);
// Destroy removes it. Optional capabilities stay reachable through sandbox.As (Unwrap).
func (s *Set) Wrap(p sandbox.Provider, fit Fit) sandbox.Provider {
	return &provider{Provider: p, set: s, fit: fit}
}

type provider struct {
	sandbox.Provider
	set *Set
	fit Fit
}

var (
	_ sandbox.Provider    = (*provider)(nil)
	_ sandbox.Wrapper     = (*provider)(nil)
	_ sandbox.Dialer      = (*provider)(nil)
	_ sandbox.StatsReader = (*provider)(nil)
	_ sandbox.Snapshotter = (*provider)(nil)
)

// Unwrap implements sandbox.Wrapper.
func (p *provider) Unwrap() sandbox.Provider { return p.Provider }

// Create implements sandbox.Provider.
func (p *provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	id := ID{Thread: spec.Labels.Thread, Gen: spec.Labels.Generation}
	dir, err := p.set.Listen(id)
	if err != nil {
		return sandbox.Handle{}, fmt.Errorf("%w: %w", sandbox.ErrNoEffect, err)
	}
	spec, err = p.fit(spec, dir)
	if err != nil {
		p.set.Forget(id)
		return sandbox.Handle{}, fmt.Errorf("%w: %w", sandbox.ErrNoEffect, err)
	}
	h, err := p.Provider.Create(ctx, spec)
	if err != nil {
		if errors.Is(err, sandbox.ErrNoEffect) {
			p.set.Forget(id)
		}
		return h, err
	}
	p.set.Remember(h.ID, id)
	return h, nil
}

// Inspect implements sandbox.Provider; a sandbox that may run again gets its socket served.
func (p *provider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	info, err := p.Provider.Inspect(ctx, h)
	if err != nil {
		return info, err
	}
	if id, ok := p.set.FromLabels(h.ID, info.Labels); ok {
		switch info.State {
		case sandbox.StateRunning, sandbox.StateStarting, sandbox.StateStopped, sandbox.StateArchived:
			if _, err := p.set.Listen(id); err != nil {
				p.set.o.Log.Warn("serving a sandbox's "+p.set.o.Name+" socket", zap.String("thread", id.Thread), zap.Error(err))
			}
		}
	}
	return info, nil
}

// Start implements sandbox.Provider.
func (p *provider) Start(ctx context.Context, h sandbox.Handle) error {
	if id, ok := p.set.Identify(ctx, p.Provider, h); ok {
		if _, err := p.set.Listen(id); err != nil {
			return fmt.Errorf("start %s: %w", h.ID, err)
		}
	}
	return p.Provider.Start(ctx, h)
}

// Destroy implements sandbox.Provider.
func (p *provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	id, known := p.set.Identify(ctx, p.Provider, h)
	if err := p.Provider.Destroy(ctx, h); err != nil {
		return err
	}
	if known {
		p.set.Forget(id)
	}
	return nil
}

// Dial implements sandbox.Dialer when the wrapped provider does (runtimes reach their servers
// through it, and assert it on the provider directly).
func (p *provider) Dial(ctx context.Context, h sandbox.Handle, port int) (net.Conn, error) {
	d, ok := p.Provider.(sandbox.Dialer)
	if !ok {
		return nil, fmt.Errorf("dial port %d on %s: %w", port, p.Name(), sandbox.ErrUnsupported)
	}
	return d.Dial(ctx, h, port)
}

// Stats implements sandbox.StatsReader when the wrapped provider does.
func (p *provider) Stats(ctx context.Context, h sandbox.Handle) (sandbox.Stats, error) {
	s, ok := p.Provider.(sandbox.StatsReader)
	if !ok {
		return sandbox.Stats{}, fmt.Errorf("stats on %s: %w", p.Name(), sandbox.ErrUnsupported)
	}
	return s.Stats(ctx, h)
}

// Snapshot implements sandbox.Snapshotter when the wrapped provider does.
func (p *provider) Snapshot(ctx context.Context, h sandbox.Handle, name string) (string, error) {
	s, ok := p.Provider.(sandbox.Snapshotter)
	if !ok {
		return "", fmt.Errorf("snapshot on %s: %w", p.Name(), sandbox.ErrUnsupported)
	}
	return s.Snapshot(ctx, h, name)
}
