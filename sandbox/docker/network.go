package docker

import (
	"context"
	"fmt"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/threadbox/threadbox/sandbox"
)

// Network full, with Docker, is a bridge network of the deployment's own, never the default bridge:
// inter-container traffic is off on it (enable_icc=false), so sandboxes do not reach each other, and
// nothing else the engine runs shares it. What a bridge still reaches (the host's services through
// the bridge gateway, the LAN, 169.254.169.254) is the operator's to firewall; README §Security says so.
const (
	// ICCOption is the bridge driver option that turns inter-container traffic on or off.
	ICCOption = "com.docker.network.bridge.enable_icc"
	// LabelNetwork marks the networks this provider made.
	LabelNetwork = "threadbox.network"
)

// networks serializes making and removing the full networks within this process, so that a Destroy
// never removes a network between a Create's check and its container.
type networks struct {
	mu sync.Mutex
}

// NetworkName is the bridge network of a deployment's sandboxes with network full.
func NetworkName(deployment string) string {
	return "threadbox-" + nameSafe(deployment) + "-full"
}

// ensureNetwork makes the deployment's full network if it is missing, and checks one it finds: a
// network of that name with inter-container traffic on is refused rather than used. p.net.mu is held.
func (p *Provider) ensureNetwork(ctx context.Context, deployment string) (string, error) {
	name := NetworkName(deployment)
	for range 2 {
		nw, err := p.cli.NetworkInspect(ctx, name, network.InspectOptions{})
		if err == nil {
			if nw.Driver != "bridge" || nw.Options[ICCOption] != "false" || nw.Internal {
				return "", fmt.Errorf("docker network %s exists but is not a bridge with %s=false; remove it (docker network rm %s) "+
					"and Threadbox makes it again", name, ICCOption, name)
			}
			return name, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return "", wrapErr("inspect network "+name, err)
		}
		_, err = p.cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver:  "bridge",
			Options: map[string]string{ICCOption: "false"},
			Labels:  map[string]string{sandbox.LabelDeployment: deployment, LabelNetwork: string(sandbox.NetworkFull)},
		})
		if err == nil {
			return name, nil
		}
		if !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "already exists") {
			return "", wrapErr("create network "+name, err)
		}
		// Another process made it first: inspect it again.
	}
	return "", fmt.Errorf("docker network %s: neither found nor created", name)
}

// pruneNetwork removes a full network no container (in any state) is on any more: a deployment's
// network lives as long as its full sandboxes.
func (p *Provider) pruneNetwork(ctx context.Context, name string) error {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	left, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("network", name))})
	if err != nil {
		return wrapErr("list containers on network "+name, err)
	}
	if len(left) > 0 {
		return nil
	}
	err = p.cli.NetworkRemove(ctx, name)
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "active endpoints") {
		return wrapErr("remove network "+name, err)
	}
	return nil
}

// fullNetwork is mode when it names a full network this provider makes, "" otherwise.
func fullNetwork(mode string) string {
	if strings.HasPrefix(mode, "threadbox-") && strings.HasSuffix(mode, "-full") {
		return mode
	}
	return ""
}
