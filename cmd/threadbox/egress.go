package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/egress"
	"github.com/threadbox/threadbox/cmd/threadbox/metrics"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
)

// Network modes as configured (sandbox.network), beyond sandbox.NetworkNone and NetworkFull.
const (
	networkAuto       = "auto"
	networkRestricted = "restricted"
)

// networkMode is sandbox.network with auto resolved: restricted for an AI runtime behind the model
// gateway on Docker (the default for AI runtimes), none otherwise.
func (m *Main) networkMode() string {
	mode := m.Config.Sandbox.Network
	if mode != networkAuto && mode != "" {
		return mode
	}
	p := m.Config.Sandbox.Provider
	if m.aiRuntime() != "" && m.Config.Gateway.Enabled && (p == docker.Name || p == "auto") {
		return networkRestricted
	}
	return string(sandbox.NetworkNone)
}

// sandboxNetwork is what the sandboxes' specs ask of the provider: restricted sandboxes have no
// network of their own (the egress proxy is reached through a mounted socket).
func (m *Main) sandboxNetwork() sandbox.NetworkMode {
	if m.networkMode() == string(sandbox.NetworkFull) {
		return sandbox.NetworkFull
	}
	return sandbox.NetworkNone
}

// newEgress builds the egress proxy when sandbox.network is restricted (nil otherwise). Its sockets
// live beside the gateway's, under gateway.socket_dir/egress.
func (m *Main) newEgress(prov sandbox.Provider, mx *metrics.Metrics) (*egress.Proxy, error) {
	if m.networkMode() != networkRestricted {
		return nil, nil
	}
	if prov.Name() != docker.Name {
		if m.Config.Sandbox.Network == networkAuto {
			return nil, nil // auto on another provider is none
		}
		return nil, fmt.Errorf("sandbox.network restricted: needs the docker provider, not %s", prov.Name())
	}
	dir, err := filepath.Abs(filepath.Join(m.Config.Gateway.SocketDir, "egress"))
	if err != nil {
		return nil, fmt.Errorf("gateway.socket_dir: %w", err)
	}
	fwd, args, err := m.forwarderBinary()
	if err != nil {
		return nil, err
	}
	cfg := m.Config.Sandbox.Egress
	var em egress.Metrics
	if mx != nil {
		em = mx.EgressCounter()
	}
	x, err := egress.New(egress.Config{
		Allow: cfg.Allow, Port: cfg.Port, SocketDir: dir, Forwarder: fwd, ForwarderArgs: args, Metrics: em,
	}, m.Logger)
	if err != nil {
		return nil, err
	}
	m.onClose(x.Close)
	allow := "nothing besides the model gateway"
	if len(cfg.Allow) > 0 {
		allow = strings.Join(cfg.Allow, ", ")
	}
	m.Logger.Info("restricted egress: sandboxes keep network none and reach only the gateway and the allowlist through the egress proxy",
		zap.String("allow", allow), zap.String("socket_dir", dir))
	return x, nil
}

// forwarderBinary is the in-sandbox forwarder: gateway.forwarder, or this binary as `threadbox
// forward` (static, as make build makes it).
func (m *Main) forwarderBinary() (string, []string, error) {
	fwd, args := m.Config.Gateway.Forwarder, []string(nil)
	if fwd == "" {
		var err error
		if fwd, err = os.Executable(); err != nil {
			return "", nil, fmt.Errorf("gateway.forwarder: finding this binary: %w", err)
		}
		args = []string{"forward"}
	}
	fwd, err := filepath.Abs(fwd)
	if err != nil {
		return "", nil, fmt.Errorf("gateway.forwarder: %w", err)
	}
	return fwd, args, nil
}
