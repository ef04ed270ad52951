package docker

import (
	"context"

	"github.com/threadbox/threadbox/sandbox"
)

var _ sandbox.Attacher = (*Provider)(nil)

// AttachCommand implements sandbox.Attacher: `docker exec -it` as the container's own user, in its
// working directory, both read from the container rather than assumed. The engine is named (-H)
// whenever it is not the docker CLI's default socket (the bot's DOCKER_HOST may not be the
// operator's), so the command works where it is pasted.
func (p *Provider) AttachCommand(ctx context.Context, h sandbox.Handle, shell string) ([]string, error) {
	if _, err := decodeHandle(h); err != nil {
		return nil, err
	}
	c, err := p.cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		return nil, wrapErr("inspect "+h.ID, err)
	}
	argv := []string{"docker"}
	if host := p.cli.DaemonHost(); host != "" && host != defaultDockerHost {
		argv = append(argv, "-H", host)
	}
	argv = append(argv, "exec", "-it")
	if c.Config != nil && c.Config.User != "" {
		argv = append(argv, "-u", c.Config.User)
	}
	if c.Config != nil && c.Config.WorkingDir != "" {
		argv = append(argv, "-w", c.Config.WorkingDir)
	}
	return append(argv, h.ID, shell), nil
}

// defaultDockerHost is the docker CLI's own default engine.
const defaultDockerHost = "unix:///var/run/docker.sock"
