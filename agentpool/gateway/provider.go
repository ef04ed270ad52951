package gateway

import (
	"errors"

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
	return g.socks.Wrap(p, g.fit)
}

// fit mounts the sandbox's gateway directory and the forwarder, and makes the forwarder the main
// process.
func (g *Gateway) fit(spec sandbox.Spec, dir string) (sandbox.Spec, error) {
	if g.cfg.Forwarder == "" {
		return spec, errors.New("gateway: no forwarder binary configured")
	}
	spec.Mounts = append(append([]sandbox.Mount(nil), spec.Mounts...),
		sandbox.Mount{Source: dir, Target: SandboxDir, ReadOnly: true},
		sandbox.Mount{Source: g.cfg.Forwarder, Target: ForwarderPath, ReadOnly: true})
	spec.Command = g.forwardCommand()
	return spec, nil
}
