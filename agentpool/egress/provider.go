package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// noProxy is what goes to the sandbox's loopback directly: the model gateway's forwarder and the
// runtimes' own servers.
const noProxy = "localhost,127.0.0.1,::1"

// Provider wraps p so that every sandbox it creates has restricted egress: network none, its proxy
// socket directory bind-mounted read-only, the forwarder relaying 127.0.0.1:<port> to it, and
// HTTP_PROXY / HTTPS_PROXY (both spellings) pointing there. When the sandbox's main process is
// already the model gateway's forwarder (wrap the gateway's provider around this one), that process
// relays egress too; otherwise the forwarder runs for egress alone. Inspect and Start serve the
// socket again after a bot restart; Destroy removes it.
func (x *Proxy) Provider(p sandbox.Provider) sandbox.Provider {
	return &restrictedProvider{Provider: p, x: x}
}

type restrictedProvider struct {
	sandbox.Provider
	x *Proxy
}

var (
	_ sandbox.Provider    = (*restrictedProvider)(nil)
	_ sandbox.Dialer      = (*restrictedProvider)(nil)
	_ sandbox.StatsReader = (*restrictedProvider)(nil)
	_ sandbox.Snapshotter = (*restrictedProvider)(nil)
)

// Env is the environment a restricted sandbox gets: the proxy for http and https, loopback direct.
func (x *Proxy) Env() map[string]string {
	u := x.URL()
	return map[string]string{
		"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": noProxy, "no_proxy": noProxy,
	}
}

// Create implements sandbox.Provider.
func (p *restrictedProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	x := p.x
	if spec.Network == sandbox.NetworkFull {
		return sandbox.Handle{}, fmt.Errorf("%w: %w: restricted egress keeps network none, but the spec asks for full",
			sandbox.ErrNoEffect, sandbox.ErrInvalidSpec)
	}
	cmd, mounts, err := x.command(spec.Command)
	if err != nil {
		return sandbox.Handle{}, fmt.Errorf("%w: %w", sandbox.ErrNoEffect, err)
	}
	id := ident{thread: spec.Labels.Thread, gen: spec.Labels.Generation}
	dir, err := x.listen(id)
	if err != nil {
		return sandbox.Handle{}, fmt.Errorf("%w: %w", sandbox.ErrNoEffect, err)
	}
	spec.Network = sandbox.NetworkNone
	spec.Command = cmd
	spec.Mounts = append(append(append([]sandbox.Mount(nil), spec.Mounts...), mounts...),
		sandbox.Mount{Source: dir, Target: SandboxDir, ReadOnly: true})
	env := maps.Clone(spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, x.Env())
	spec.Env = env
	h, err := p.Provider.Create(ctx, spec)
	if err != nil {
		if errors.Is(err, sandbox.ErrNoEffect) {
			x.forget(id)
		}
		return h, err
	}
	x.remember(h.ID, id)
	return h, nil
}

// command is the sandbox's main process with egress relayed: the gateway's forwarder with the egress
// flags added, or the forwarder for egress alone (and its mount) when there is no main process yet.
func (x *Proxy) command(cmd []string) ([]string, []sandbox.Mount, error) {
	flags := []string{"-egress-listen", "127.0.0.1:" + strconv.Itoa(x.cfg.Port), "-egress-socket", SandboxDir + "/" + socketName}
	switch {
	case len(cmd) > 0 && cmd[0] == ForwarderPath:
		return append(append([]string(nil), cmd...), flags...), nil, nil
	case len(cmd) > 0:
		return nil, nil, fmt.Errorf("egress: the sandbox's main process is %q, not the forwarder, so nothing would relay egress", cmd[0])
	case x.cfg.Forwarder == "":
		return nil, nil, errors.New("egress: no forwarder binary configured")
	}
	out := append([]string{ForwarderPath}, x.cfg.ForwarderArgs...)
	out = append(append(out, "-socket", ""), flags...) // no gateway: egress only
	return out, []sandbox.Mount{{Source: x.cfg.Forwarder, Target: ForwarderPath, ReadOnly: true}}, nil
}

// Inspect implements sandbox.Provider; a sandbox that may run again gets its socket served.
func (p *restrictedProvider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	info, err := p.Provider.Inspect(ctx, h)
	if err != nil {
		return info, err
	}
	if id, ok := p.x.identLabels(h.ID, info.Labels); ok {
		switch info.State {
		case sandbox.StateRunning, sandbox.StateStarting, sandbox.StateStopped, sandbox.StateArchived:
			if _, err := p.x.listen(id); err != nil {
				p.x.log.Warn("serving a sandbox's egress socket", zap.String("thread", id.thread), zap.Error(err))
			}
		}
	}
	return info, nil
}

// Start implements sandbox.Provider.
func (p *restrictedProvider) Start(ctx context.Context, h sandbox.Handle) error {
	if id, ok := p.x.identify(ctx, p.Provider, h); ok {
		if _, err := p.x.listen(id); err != nil {
			return fmt.Errorf("start %s: %w", h.ID, err)
		}
	}
	return p.Provider.Start(ctx, h)
}

// Destroy implements sandbox.Provider.
func (p *restrictedProvider) Destroy(ctx context.Context, h sandbox.Handle) error {
	id, known := p.x.identify(ctx, p.Provider, h)
	if err := p.Provider.Destroy(ctx, h); err != nil {
		return err
	}
	if known {
		p.x.forget(id)
	}
	return nil
}

// Dial implements sandbox.Dialer when the wrapped provider does.
func (p *restrictedProvider) Dial(ctx context.Context, h sandbox.Handle, port int) (net.Conn, error) {
	d, ok := p.Provider.(sandbox.Dialer)
	if !ok {
		return nil, fmt.Errorf("dial port %d on %s: %w", port, p.Name(), sandbox.ErrUnsupported)
	}
	return d.Dial(ctx, h, port)
}

// Stats implements sandbox.StatsReader when the wrapped provider does.
func (p *restrictedProvider) Stats(ctx context.Context, h sandbox.Handle) (sandbox.Stats, error) {
	s, ok := p.Provider.(sandbox.StatsReader)
	if !ok {
		return sandbox.Stats{}, fmt.Errorf("stats on %s: %w", p.Name(), sandbox.ErrUnsupported)
	}
	return s.Stats(ctx, h)
}

// Snapshot implements sandbox.Snapshotter when the wrapped provider does.
func (p *restrictedProvider) Snapshot(ctx context.Context, h sandbox.Handle, name string) (string, error) {
	s, ok := p.Provider.(sandbox.Snapshotter)
	if !ok {
		return "", fmt.Errorf("snapshot on %s: %w", p.Name(), sandbox.ErrUnsupported)
	}
	return s.Snapshot(ctx, h, name)
}
