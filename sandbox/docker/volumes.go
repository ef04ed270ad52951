package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"

	"github.com/threadbox/threadbox/sandbox"
)

var _ sandbox.VolumeReaper = (*Provider)(nil)

// ErrVolumeInUse: RemoveVolume refused a volume some container still mounts.
var ErrVolumeInUse = fmt.Errorf("volume in use: %w", sandbox.ErrInvalidSpec)

// ListVolumes implements sandbox.VolumeReaper: the volumes carrying all of labels (and, for a fenced
// provider, this deployment's label), each marked InUse when any container, running or not, mounts it.
// Create labels the work volume like its container, so a volume whose container was removed behind
// our back (docker rm -f without -v) is found here and nowhere else.
func (p *Provider) ListVolumes(ctx context.Context, labels map[string]string) ([]sandbox.Volume, error) {
	vols, err := p.cli.VolumeList(ctx, volume.ListOptions{Filters: p.labelFilter(labels)})
	if err != nil {
		return nil, wrapErr("list volumes", err)
	}
	// Any container counts, labelled or not: a volume someone mounts is never ours to remove.
	cs, err := p.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, wrapErr("list containers", err)
	}
	used := map[string]bool{}
	for _, c := range cs {
		for _, m := range c.Mounts {
			if m.Type == mount.TypeVolume {
				used[m.Name] = true
			}
		}
	}
	out := make([]sandbox.Volume, 0, len(vols.Volumes))
	for _, v := range vols.Volumes {
		if v == nil {
			continue
		}
		sv := sandbox.Volume{Name: v.Name, Labels: v.Labels, InUse: used[v.Name]}
		if t, err := time.Parse(time.RFC3339, v.CreatedAt); err == nil {
			sv.CreatedAt = t.UTC()
		}
		out = append(out, sv)
	}
	return out, nil
}

// RemoveVolume implements sandbox.VolumeReaper. It never forces: the daemon refuses a volume in use
// (ErrVolumeInUse), so a container created between ListVolumes and this call keeps its files.
func (p *Provider) RemoveVolume(ctx context.Context, name string) error {
	err := p.cli.VolumeRemove(ctx, name, false)
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("docker remove volume %s: %w: %s", name, ErrVolumeInUse, err)
	}
	return wrapErr("remove volume "+name, err)
}
