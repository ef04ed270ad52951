package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
)

// Probe reports whether a Docker daemon answers at host (empty: DOCKER_HOST or the default socket),
// its server version, and whether image is present locally. It is for `threadbox doctor` and for
// picking a provider at startup, so it never pulls and never creates anything.
func Probe(ctx context.Context, host, image string) (version string, hasImage bool, err error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	c, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return "", false, fmt.Errorf("docker client: %w", err)
	}
	defer c.Close()
	v, err := c.ServerVersion(ctx)
	if err != nil {
		return "", false, fmt.Errorf("docker daemon at %s: %w", c.DaemonHost(), err)
	}
	if image == "" {
		return v.Version, false, nil
	}
	if _, err := c.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return v.Version, false, nil
		}
		return v.Version, false, fmt.Errorf("docker image %s: %w", image, err)
	}
	return v.Version, true, nil
}
