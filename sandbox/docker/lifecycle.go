package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"

	"github.com/threadbox/threadbox/sandbox"
)

// Inspect implements sandbox.Provider.
func (p *Provider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return sandbox.Info{}, err
	}
	c, err := p.cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		return sandbox.Info{}, wrapErr("inspect "+h.ID, err)
	}
	info := infoFromInspect(c)
	if st.complete() {
		info.Handle = newHandle(c.ID, st) // keep what Create resolved (uid/gid of named users)
	}
	return info, nil
}

// Start implements sandbox.Provider. Starting a running sandbox is a no-op (the daemon answers 304).
func (p *Provider) Start(ctx context.Context, h sandbox.Handle) error {
	if _, err := decodeHandle(h); err != nil {
		return err
	}
	err := p.cli.ContainerStart(ctx, h.ID, container.StartOptions{})
	if err != nil && cerrdefs.IsConflict(err) {
		// Only a paused container refuses to start; we never pause, but someone may have.
		if uerr := p.cli.ContainerUnpause(ctx, h.ID); uerr == nil {
			return nil
		}
	}
	return wrapErr("start "+h.ID, err)
}

// Stop implements sandbox.Provider: SIGTERM, then SIGKILL after the stop timeout. The work volume
// and the container's layer are kept. Stopping a stopped sandbox is a no-op.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle) error {
	if _, err := decodeHandle(h); err != nil {
		return err
	}
	secs := int(p.stopTimeout.Round(time.Second) / time.Second)
	return wrapErr("stop "+h.ID, p.cli.ContainerStop(ctx, h.ID, container.StopOptions{Timeout: &secs}))
}

// Destroy implements sandbox.Provider: force-remove the container, then its work volume. Either
// being gone already is success, so Destroy after an out-of-band docker rm -f still frees the volume.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	st, err := decodeHandle(h)
	if err != nil {
		return err
	}
	if st.Volume == "" {
		// A handle without state (hand-built, or from an older shape): find the volume first.
		c, err := p.cli.ContainerInspect(ctx, h.ID)
		switch {
		case cerrdefs.IsNotFound(err):
			return nil
		case err != nil:
			return wrapErr("inspect "+h.ID, err)
		}
		st.Volume = workVolume(c.Mounts)
		if c.HostConfig != nil {
			st.Network = fullNetwork(string(c.HostConfig.NetworkMode))
		}
	}
	if err := p.destroy(ctx, h.ID, st.Volume); err != nil {
		return err
	}
	if st.Network != "" {
		// The sandbox is gone either way; a network left behind goes with the next full sandbox's destroy.
		_ = p.bestEffort(ctx, "remove network", func(ctx context.Context) error { return p.pruneNetwork(ctx, st.Network) })
	}
	return nil
}

func (p *Provider) destroy(ctx context.Context, id, vol string) error {
	err := p.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if isBeingRemoved(err) {
		// Someone else (docker rm -f, a replica) is removing it: the outcome we want, once it is
		// done; and the volume can only go after the container.
		err = p.waitRemoved(ctx, id)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return wrapErr("remove "+id, err)
	}
	p.cpu.forget(id)
	if vol != "" {
		if err := p.removeVolume(ctx, vol); err != nil {
			return err
		}
	}
	return nil
}

// waitRemoved waits until the daemon has removed container id.
func (p *Provider) waitRemoved(ctx context.Context, id string) error {
	done, errc := p.cli.ContainerWait(ctx, id, container.WaitConditionRemoved)
	select {
	case <-done:
		return nil
	case err := <-errc:
		return err // a NotFound here means it is gone already
	}
}

func (p *Provider) removeVolume(ctx context.Context, vol string) error {
	if err := p.cli.VolumeRemove(ctx, vol, true); err != nil && !cerrdefs.IsNotFound(err) {
		return wrapErr("remove volume "+vol, err)
	}
	return nil
}

// List implements sandbox.Provider: containers in any state carrying all of labels. Resources and
// User are left zero (the list endpoint does not report them; Inspect does).
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	cs, err := p.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: p.labelFilter(labels)})
	if err != nil {
		return nil, wrapErr("list", err)
	}
	out := make([]sandbox.Info, 0, len(cs))
	for _, c := range cs {
		out = append(out, sandbox.Info{
			Handle:    newHandle(c.ID, handleState{Volume: workVolume(c.Mounts), Network: fullNetwork(c.HostConfig.NetworkMode)}),
			State:     mapState(c.State),
			Labels:    c.Labels,
			Image:     c.Image,
			CreatedAt: time.Unix(c.Created, 0).UTC(),
			Network:   mapNetwork(c.HostConfig.NetworkMode),
		})
	}
	return out, nil
}

// labelFilter selects objects carrying all of labels and, for a fenced provider, this deployment's.
func (p *Provider) labelFilter(labels map[string]string) filters.Args {
	args := filters.NewArgs()
	for k, v := range labels {
		args.Add("label", k+"="+v)
	}
	if p.deployment != "" {
		args.Add("label", sandbox.LabelDeployment+"="+p.deployment)
	}
	return args
}

func infoFromInspect(c container.InspectResponse) sandbox.Info {
	info := sandbox.Info{Handle: newHandle(c.ID, stateFromInspect(c))}
	if c.State != nil {
		info.State = mapState(c.State.Status)
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		info.CreatedAt = t.UTC()
	}
	if c.Config != nil {
		info.Labels, info.Image, info.User = c.Config.Labels, c.Config.Image, c.Config.User
	}
	if hc := c.HostConfig; hc != nil {
		info.Network = mapNetwork(string(hc.NetworkMode))
		info.Resources = sandbox.Resources{
			MemoryMB: int(hc.Memory >> 20),
			CPUs:     float64(hc.NanoCPUs) / 1e9,
		}
		if hc.PidsLimit != nil {
			info.Resources.PIDs = int(*hc.PidsLimit)
		}
	}
	return info
}

// stateFromInspect rebuilds the handle state from the container. uid and gid are only known here
// for numeric users; meta resolves names when a file operation needs them.
func stateFromInspect(c container.InspectResponse) handleState {
	st := handleState{Volume: workVolume(c.Mounts), UID: -1, GID: -1}
	if c.Config != nil {
		st.User, st.WorkDir = c.Config.User, c.Config.WorkingDir
		if u, g, ok := numericUser(st.User); ok {
			st.UID, st.GID = u, g
		}
	}
	if c.HostConfig != nil {
		st.ReadOnlyRoot = c.HostConfig.ReadonlyRootfs
		st.Network = fullNetwork(string(c.HostConfig.NetworkMode))
	}
	return st
}

// meta returns complete state for h, asking the daemon only when the handle lacks it.
func (p *Provider) meta(ctx context.Context, h sandbox.Handle) (handleState, error) {
	st, err := decodeHandle(h)
	if err != nil || st.complete() {
		return st, err
	}
	c, err := p.cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		return st, wrapErr("inspect "+h.ID, err)
	}
	st = stateFromInspect(c)
	if st.UID < 0 {
		if st.UID, st.GID, err = p.resolveOwner(ctx, h.ID, st.User); err != nil {
			return st, err
		}
	}
	return st, nil
}

func numericUser(u string) (uid, gid int, ok bool) {
	name, group, has := strings.Cut(u, ":")
	uid, ok1 := atoi(name)
	gid, ok2 := atoi(group)
	return uid, gid, has && ok1 && ok2
}

// workVolume finds the work volume among a container's mounts: the volume Create named
// <container name>-work. An image that declares VOLUMEs gives the container anonymous volumes too,
// and the daemon lists mounts in no fixed order, so "the first volume" would be one of those half the
// time (Destroy would then leave the work volume behind).
func workVolume(ms []container.MountPoint) string {
	for _, m := range ms {
		if m.Type == mount.TypeVolume && strings.HasPrefix(m.Name, "threadbox-") && strings.HasSuffix(m.Name, workVolumeSuffix) {
			return m.Name
		}
	}
	return ""
}

// workVolumeSuffix ends the name of every work volume (its container's name, then this).
const workVolumeSuffix = "-work"

func mapState(s string) sandbox.State {
	switch s {
	case container.StateRunning:
		return sandbox.StateRunning
	case container.StateCreated, container.StateExited, container.StatePaused:
		return sandbox.StateStopped
	case container.StateRestarting:
		return sandbox.StateStarting
	default: // dead, removing, or something newer than this build
		return sandbox.StateFailed
	}
}

func mapNetwork(mode string) sandbox.NetworkMode {
	if mode == "none" {
		return sandbox.NetworkNone
	}
	return sandbox.NetworkFull
}

// Stats implements sandbox.StatsReader with one-shot stats (no daemon-side sampling wait). A one-shot
// reading has no previous sample to compute CPU use from, so the provider keeps the last reading of
// each container; the first reading of a container reports 0% CPU.
func (p *Provider) Stats(ctx context.Context, h sandbox.Handle) (sandbox.Stats, error) {
	if _, err := decodeHandle(h); err != nil {
		return sandbox.Stats{}, err
	}
	resp, err := p.cli.ContainerStatsOneShot(ctx, h.ID)
	if err != nil {
		return sandbox.Stats{}, wrapErr("stats "+h.ID, err)
	}
	defer resp.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return sandbox.Stats{}, fmt.Errorf("docker stats %s: decode: %w", h.ID, err)
	}
	if s.Read.IsZero() || s.PidsStats.Current == 0 {
		// A stopped container reports an empty reading.
		return sandbox.Stats{}, fmt.Errorf("docker stats %s: %w", h.ID, sandbox.ErrNotRunning)
	}
	mem := s.MemoryStats.Usage
	// Page cache is reclaimable; report what docker stats reports (cgroup v1 and v2 key names).
	for _, k := range []string{"total_inactive_file", "inactive_file"} {
		if v, ok := s.MemoryStats.Stats[k]; ok && v < mem {
			mem -= v
			break
		}
	}
	var rx, tx, blkRead, blkWrite uint64
	for _, n := range s.Networks {
		rx, tx = rx+n.RxBytes, tx+n.TxBytes
	}
	for _, e := range s.BlkioStats.IoServiceBytesRecursive {
		switch strings.ToLower(e.Op) {
		case "read":
			blkRead += e.Value
		case "write":
			blkWrite += e.Value
		}
	}
	cur := cpuSample{total: s.CPUStats.CPUUsage.TotalUsage, system: s.CPUStats.SystemUsage}
	prev := cpuSample{total: s.PreCPUStats.CPUUsage.TotalUsage, system: s.PreCPUStats.SystemUsage}
	if prev.system == 0 {
		prev = p.cpu.swap(h.ID, cur)
	}
	return sandbox.Stats{
		CPUPercent:  cpuPercent(prev, cur, s.CPUStats.OnlineCPUs),
		MemoryBytes: mem,
		MemoryLimit: s.MemoryStats.Limit,
		PIDs:        s.PidsStats.Current,
		NetRxBytes:  rx, NetTxBytes: tx,
		BlockReadBytes: blkRead, BlockWriteBytes: blkWrite,
	}, nil
}

type cpuSample struct{ total, system uint64 }

// cpuPercent is docker stats' formula: 100% is one fully used CPU.
func cpuPercent(prev, cur cpuSample, online uint32) float64 {
	if prev.system == 0 || cur.system <= prev.system || cur.total < prev.total {
		return 0
	}
	if online == 0 {
		online = 1
	}
	return float64(cur.total-prev.total) / float64(cur.system-prev.system) * float64(online) * 100
}

// cpuSamples keeps the previous CPU reading per container.
type cpuSamples struct {
	mu   sync.Mutex // protects the following
	last map[string]cpuSample
}

// swap stores cur and returns the previous sample (zero if none).
func (c *cpuSamples) swap(id string, cur cpuSample) cpuSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.last[id]
	if len(c.last) >= 4096 {
		// Containers destroyed behind our back never call forget: bound the map crudely.
		clear(c.last)
	}
	c.last[id] = cur
	return prev
}

func (c *cpuSamples) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.last, id)
}
