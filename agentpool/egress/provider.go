package egress

import (
	"errors"
	"fmt"
	"maps"
	"strconv"

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
	return x.socks.Wrap(p, x.fit)
}

// Env is the environment a restricted sandbox gets: the proxy for http and https, loopback direct.
func (x *Proxy) Env() map[string]string {
	u := x.URL()
	return map[string]string{
		"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": noProxy, "no_proxy": noProxy,
	}
}

// fit keeps the sandbox on network none, mounts its egress directory (and the forwarder when it
// runs for egress alone), relays egress through the main process, and sets the proxy environment.
func (x *Proxy) fit(spec sandbox.Spec, dir string) (sandbox.Spec, error) {
	if spec.Network == sandbox.NetworkFull {
		return spec, fmt.Errorf("%w: restricted egress keeps network none, but the spec asks for full", sandbox.ErrInvalidSpec)
	}
	cmd, mounts, err := x.command(spec.Command)
	if err != nil {
		return spec, err
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
	return spec, nil
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
