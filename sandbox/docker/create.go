package docker

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// Create implements sandbox.Provider. It creates a labelled volume for the work directory, then the
// container, makes the work directory the sandbox user's, and starts it.
//
// Failures wrap sandbox.ErrNoEffect only when nothing is left behind for sure: an invalid spec, the
// daemon unreachable before the first request, or a refusal (missing image) after which the volume
// was removed again. A container that was created but failed later is destroyed best-effort; if even
// that fails, its labels let the reaper find it.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	if p.deployment != "" {
		if spec.Labels.Deployment == "" {
			spec.Labels.Deployment = p.deployment
		} else if spec.Labels.Deployment != p.deployment {
			return sandbox.Handle{}, fmt.Errorf("docker create: %w: %w: deployment %q, this provider serves %q",
				sandbox.ErrNoEffect, sandbox.ErrInvalidSpec, spec.Labels.Deployment, p.deployment)
		}
	}
	spec, err := spec.Normalize()
	if err == nil && spec.WorkDir == "/" {
		err = fmt.Errorf("%w: workdir / cannot be a volume", sandbox.ErrInvalidSpec)
	}
	if err != nil {
		return sandbox.Handle{}, fmt.Errorf("docker create: %w: %w", sandbox.ErrNoEffect, err)
	}

	name := containerName(spec.Labels.Deployment)
	labels := spec.Labels.Map()
	st := handleState{Volume: name + workVolumeSuffix, User: spec.User, WorkDir: spec.WorkDir, ReadOnlyRoot: spec.ReadOnlyRoot}

	// The work directory lives in a named volume, not the container's layer, so that it survives
	// stop/start (it would anyway) and stays writable under a read-only root. It carries the same labels.
	if _, err := p.cli.VolumeCreate(ctx, volume.CreateOptions{Name: st.Volume, Labels: labels}); err != nil {
		p.bestEffort(ctx, "remove volume", func(ctx context.Context) error { return p.removeVolume(ctx, st.Volume) })
		return sandbox.Handle{}, wrapErr("create volume", err)
	}

	cfg, hc := containerConfig(spec, st.Volume, labels)
	p.withDiskLimits(hc, spec.Resources.DiskMB)
	unlock := func() {}
	if spec.Network == sandbox.NetworkFull {
		p.net.mu.Lock()
		unlock = p.net.mu.Unlock
		if st.Network, err = p.ensureNetwork(ctx, spec.Labels.Deployment); err != nil {
			unlock()
			p.bestEffort(ctx, "remove volume", func(ctx context.Context) error { return p.removeVolume(ctx, st.Volume) })
			return sandbox.Handle{}, fmt.Errorf("docker create: %w", err)
		}
		hc.NetworkMode = container.NetworkMode(st.Network)
	}
	created, err := p.createContainer(ctx, cfg, hc, name)
	unlock()
	if err != nil {
		rmErr := p.bestEffort(ctx, "remove volume", func(ctx context.Context) error { return p.removeVolume(ctx, st.Volume) })
		if cerrdefs.IsNotFound(err) {
			// The daemon answers 404 for a missing image; there is no registry to pull from.
			if rmErr == nil {
				return sandbox.Handle{}, fmt.Errorf("docker create: %w: %w: image %s is not on the engine (build it; nothing is pulled): %s",
					sandbox.ErrNoEffect, sandbox.ErrInvalidSpec, spec.Image, err)
			}
			return sandbox.Handle{}, fmt.Errorf("docker create: %w: image %s is not on the engine: %s", sandbox.ErrInvalidSpec, spec.Image, err)
		}
		if rmErr == nil && cerrdefs.IsInvalidArgument(err) {
			return sandbox.Handle{}, fmt.Errorf("docker create: %w: %w: %s", sandbox.ErrNoEffect, sandbox.ErrInvalidSpec, err)
		}
		return sandbox.Handle{}, wrapErr("create container", err)
	}

	fail := func(err error) (sandbox.Handle, error) {
		_ = p.bestEffort(ctx, "destroy half-created sandbox", func(ctx context.Context) error {
			return p.destroy(ctx, created.ID, st.Volume)
		})
		return sandbox.Handle{}, err
	}
	if st.UID, st.GID, err = p.prepareWorkDir(ctx, created.ID, spec, st); err != nil {
		return fail(err)
	}
	if err := p.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return fail(wrapErr("start container", err))
	}
	return newHandle(created.ID, st), nil
}

// containerConfig renders the spec. Hardening is not optional: every capability dropped, no privilege
// gain through setuid binaries, a pids limit, and an init process to reap what agents orphan.
func containerConfig(spec sandbox.Spec, vol string, labels map[string]string) (*container.Config, *container.HostConfig) {
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	pids := int64(spec.Resources.PIDs)
	init := true
	cfg := &container.Config{
		Image:      spec.Image,
		User:       spec.User,
		Env:        env,
		WorkingDir: spec.WorkDir,
		Labels:     labels,
	}
	hc := &container.HostConfig{
		// Network full: Create puts the container on the deployment's own network (network.go).
		NetworkMode: container.NetworkMode("none"),
		Resources: container.Resources{
			Memory:     int64(spec.Resources.MemoryMB) << 20,
			MemorySwap: int64(spec.Resources.MemoryMB) << 20, // no swap beyond the memory limit
			NanoCPUs:   int64(spec.Resources.CPUs * 1e9),
			PidsLimit:  &pids,
		},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Init:           &init, // docker-init is bind-mounted by the daemon: works with FROM-scratch images
		ReadonlyRootfs: spec.ReadOnlyRoot,
		Mounts:         []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: spec.WorkDir}},
	}
	for _, m := range spec.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	if len(spec.Command) > 0 {
		// The entrypoint too: an image's ENTRYPOINT would otherwise get the command as arguments.
		cfg.Entrypoint, cfg.Cmd = spec.Command[:1], spec.Command[1:]
	}
	if spec.ReadOnlyRoot {
		// tmpfs pages count against the memory limit; the size bound keeps /tmp from taking all of
		// it, and noexec keeps it a place for data, not for dropped binaries.
		hc.Tmpfs = map[string]string{"/tmp": fmt.Sprintf("rw,noexec,nosuid,nodev,size=%dm,mode=1777", spec.Resources.TmpMB)}
	}
	return cfg, hc
}

// containerName is threadbox-<deployment>-<random>, with the deployment reduced to what Docker
// accepts in a name; the labels, not the name, are what attribute a container.
func containerName(deployment string) string {
	return "threadbox-" + nameSafe(deployment) + "-" + strings.ToLower(rand.Text()[:10])
}

// nameSafe is the deployment as a part of a Docker object name: the characters Docker accepts, the
// others as '-', at most 40.
func nameSafe(deployment string) string {
	var b strings.Builder
	for _, c := range deployment {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// bestEffort runs a cleanup step under its own bounded context, so that it still runs when the
// caller's ctx is what failed, and logs instead of returning its error over the caller's.
func (p *Provider) bestEffort(ctx context.Context, what string, f func(context.Context) error) error {
	cctx, cancel := cleanupCtx(ctx)
	defer cancel()
	err := f(cctx)
	if err != nil {
		p.log.Warn("cleanup failed", zap.String("step", what), zap.Error(err))
	}
	return err
}
