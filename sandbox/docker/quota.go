package docker

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/docker/docker/api/types/container"
)

// Disk limits. A sandbox writes to three places, each bounded its own way:
//   - the work volume: no Docker volume driver here can cap it, so the pool measures it during and
//     after each turn (agentpool's disk quota) and stops the turn when it is over;
//   - every single file anywhere is capped at disk_mb by RLIMIT_FSIZE (exec'd processes inherit
//     it), so one `dd` cannot get past the limit at all: the write fails with EFBIG (SIGXFSZ);
//   - the container's writable layer (when the root is not read-only) is capped with
//     `--storage-opt size` where the engine supports it: overlay2 on xfs mounted with pquota,
//     btrfs, zfs or devicemapper. Elsewhere the engine refuses the option; we ask it once.
//
// /tmp is a tmpfs whose size counts against the memory limit.

// quota states, as storageQuota holds them.
const (
	quotaUnknown int32 = iota // overlay2 on xfs: only a create can tell whether pquota is on
	quotaYes
	quotaNo
)

// quotaFacts are what the engine said about --storage-opt size.
type quotaFacts struct {
	state atomic.Int32
	// why says, for doctor, what the engine runs on.
	why atomic.Pointer[string]
}

// probeStorageQuota reads the storage driver from the engine's info and records whether
// --storage-opt size can work.
func (p *Provider) probeStorageQuota(ctx context.Context) {
	info, err := p.cli.Info(ctx)
	if err != nil {
		p.setQuota(quotaUnknown, "the engine's storage driver is unknown ("+err.Error()+")")
		return
	}
	backing := ""
	for _, kv := range info.DriverStatus {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	on := info.Driver
	if backing != "" {
		on += " on " + backing
	}
	switch {
	case info.Driver == "overlay2" && backing == "xfs":
		p.setQuota(quotaUnknown, on+": --storage-opt size works if xfs is mounted with pquota (tried at the first create)")
	case info.Driver == "btrfs", info.Driver == "zfs", info.Driver == "devicemapper":
		p.setQuota(quotaYes, on+": --storage-opt size caps each container's writable layer")
	default:
		p.setQuota(quotaNo, on+": the engine cannot cap a container's layer (--storage-opt size needs overlay2 on xfs with pquota, btrfs or zfs)")
	}
}

func (p *Provider) setQuota(state int32, why string) {
	p.quota.state.Store(state)
	p.quota.why.Store(&why)
}

// StorageQuota reports whether the engine caps each container's writable layer at disk_mb
// (--storage-opt size), and what it runs on. doctor prints it.
func (p *Provider) StorageQuota() (supported bool, detail string) {
	why := ""
	if w := p.quota.why.Load(); w != nil {
		why = *w
	}
	return p.quota.state.Load() == quotaYes, why
}

// withDiskLimits caps every file at diskMB, and the writable layer too where the engine can.
func (p *Provider) withDiskLimits(hc *container.HostConfig, diskMB int) {
	if diskMB <= 0 {
		return
	}
	limit := int64(diskMB) << 20
	hc.Ulimits = append(hc.Ulimits, &container.Ulimit{Name: "fsize", Soft: limit, Hard: limit})
	if p.quota.state.Load() != quotaNo {
		hc.StorageOpt = map[string]string{"size": fmt.Sprintf("%dM", diskMB)}
	}
}

// createContainer creates the container, and when the engine refuses --storage-opt (no quota
// support), remembers that and creates it without.
func (p *Provider) createContainer(ctx context.Context, cfg *container.Config, hc *container.HostConfig, name string) (container.CreateResponse, error) {
	created, err := p.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err == nil || hc.StorageOpt == nil || !strings.Contains(err.Error(), "storage-opt") {
		if err == nil && hc.StorageOpt != nil {
			p.quota.state.CompareAndSwap(quotaUnknown, quotaYes)
		}
		return created, err
	}
	_, why := p.StorageQuota()
	p.setQuota(quotaNo, why+"; the engine refused it: "+oneLine(err.Error()))
	p.log.Info("the engine cannot cap container layers; disk_mb is enforced on files and the work volume only")
	hc.StorageOpt = nil
	return p.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
