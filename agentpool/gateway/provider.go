package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// Provider wraps p so that every sandbox it creates reaches the gateway with no network: its host
// directory (socket and token) and the forwarder are bind-mounted read-only, and the forwarder is the
// sandbox's main process, so it runs again on every start and an agent that kills it stops its own
// sandbox (the next turn resumes it). Inspect and Start serve the socket again after a bot restart;
// Destroy removes it.
func (g *Gateway) Provider(p sandbox.Provider) sandbox.Provider {
	g.mu.Lock()
	g.prov = p
	g.mu.Unlock()
	return &gatedProvider{Provider: p, g: g}
}

type gatedProvider struct {
	sandbox.Provider
	g *Gateway
}

var (
	_ sandbox.Provider    = (*gatedProvider)(nil)
	_ sandbox.Dialer      = (*gatedProvider)(nil)
	_ sandbox.StatsReader = (*gatedProvider)(nil)
	_ sandbox.Snapshotter = (*gatedProvider)(nil)
)

// Create implements sandbox.Provider.
func (p *gatedProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	if p.g.cfg.Forwarder == "" {
		return sandbox.Handle{}, fmt.Errorf("gateway: %w: no forwarder binary configured", sandbox.ErrNoEffect)
	}
	id := ident{thread: spec.Labels.Thread, gen: spec.Labels.Generation}
	dir, err := p.g.listen(id)
	if err != nil {
		return sandbox.Handle{}, fmt.Errorf("%w: %w", sandbox.ErrNoEffect, err)
	}
	spec.Mounts = append(append([]sandbox.Mount(nil), spec.Mounts...),
		sandbox.Mount{Source: dir, Target: SandboxDir, ReadOnly: true},
		sandbox.Mount{Source: p.g.cfg.Forwarder, Target: ForwarderPath, ReadOnly: true})
	spec.Command = p.g.forwardCommand()
	h, err := p.Provider.Create(ctx, spec)
	if err != nil {
		if errors.Is(err, sandbox.ErrNoEffect) {
			p.g.forget(id)
		}
		return h, err
	}
	p.g.remember(h.ID, id)
	return h, nil
}

// Inspect implements sandbox.Provider; a sandbox that may run again gets its socket served.
func (p *gatedProvider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	info, err := p.Provider.Inspect(ctx, h)
	if err != nil {
		return info, err
	}
	if id, ok := p.g.identLabels(h.ID, info.Labels); ok {
		switch info.State {
		case sandbox.StateRunning, sandbox.StateStarting, sandbox.StateStopped, sandbox.StateArchived:
			if _, err := p.g.listen(id); err != nil {
				p.g.log.Warn("serving a sandbox's gateway socket", zap.String("thread", id.thread), zap.Error(err))
			}
		}
	}
	return info, nil
}

// Start implements sandbox.Provider.
func (p *gatedProvider) Start(ctx context.Context, h sandbox.Handle) error {
	if id, ok := p.g.identify(ctx, h); ok {
		if _, err := p.g.listen(id); err != nil {
			return fmt.Errorf("start %s: %w", h.ID, err)
		}
	}
	return p.Provider.Start(ctx, h)
}

// Destroy implements sandbox.Provider.
func (p *gatedProvider) Destroy(ctx context.Context, h sandbox.Handle) error {
	id, known := p.g.identify(ctx, h)
	if err := p.Provider.Destroy(ctx, h); err != nil {
		return err
	}
	if known {
		p.g.forget(id)
	}
	return nil
}

// Dial implements sandbox.Dialer when the wrapped provider does.
func (p *gatedProvider) Dial(ctx context.Context, h sandbox.Handle, port int) (net.Conn, error) {
	d, ok := p.Provider.(sandbox.Dialer)
	if !ok {
		return nil, fmt.Errorf("dial port %d on %s: %w", port, p.Name(), sandbox.ErrUnsupported)
	}
	return d.Dial(ctx, h, port)
}

// Stats implements sandbox.StatsReader when the wrapped provider does.
func (p *gatedProvider) Stats(ctx context.Context, h sandbox.Handle) (sandbox.Stats, error) {
	s, ok := p.Provider.(sandbox.StatsReader)
	if !ok {
		return sandbox.Stats{}, fmt.Errorf("stats on %s: %w", p.Name(), sandbox.ErrUnsupported)
	}
	return s.Stats(ctx, h)
}

// Snapshot implements sandbox.Snapshotter when the wrapped provider does.
func (p *gatedProvider) Snapshot(ctx context.Context, h sandbox.Handle, name string) (string, error) {
	s, ok := p.Provider.(sandbox.Snapshotter)
	if !ok {
		return "", fmt.Errorf("snapshot on %s: %w", p.Name(), sandbox.ErrUnsupported)
	}
	return s.Snapshot(ctx, h, name)
}
