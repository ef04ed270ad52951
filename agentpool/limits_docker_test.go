package agentpool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

func newLimitFixture(t *testing.T, diskMB int) fixture {
	t.Helper()
	dep := "limittest-" + randomSuffix()
	prov := dockertest.New(t, docker.Options{Deployment: dep})
	t.Cleanup(func() { destroyDeployment(t, prov, dep) })
	return newFixture(t, dbtest.OpenPostgres(t), prov, shellrt.New(), func(c *Config) {
		c.Deployment, c.Image = dep, dockertest.Image()
		c.Resources.MemoryMB, c.Resources.DiskMB = 512, diskMB
		c.EnforceLimits, c.LimitCheckInterval = true, 200*time.Millisecond
	})
}

// TestDockerMemoryLimitEndsTheTurn: a process that allocates past the memory limit is killed by the
// kernel, and the turn ends with the memory limit, not an exit code. A later turn in the same sandbox
// is not blamed for the earlier kill.
func TestDockerMemoryLimitEndsTheTurn(t *testing.T) {
	f := newLimitFixture(t, 0)
	sink := newCollector()
	submit(t, f.pool, "web:oom", "e1", "echo warm", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)

	// tail keeps the "last lines" of a stream without newlines: all of it.
	submit(t, f.pool, "web:oom", "e2", "tail /dev/zero", sink)
	out := sink.wait(t, 1)[0]
	lim, ok := out.Err.(*LimitError)
	require.True(t, ok, "the turn ended with the limit, not %v", out.Err)
	require.Equal(t, LimitMemory, lim.Kind)
	require.Equal(t, 512, lim.LimitMB)
	require.Equal(t, "hit the 512 MiB memory limit", lim.Error())

	submit(t, f.pool, "web:oom", "e3", "echo fine", sink)
	out = sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "fine", out.Answer)

	// Stopped and started again (as a pause and resume do), the sandbox's memory cgroup counts from
	// zero: one more kill must still be seen.
	sess, err := f.store.SessionGet(t.Context(), "web:oom")
	require.NoError(t, err)
	require.NoError(t, f.prov.Stop(t.Context(), mustHandle(t, sess)))
	submit(t, f.pool, "web:oom", "e4", "tail /dev/zero", sink)
	out = sink.wait(t, 1)[0]
	lim, ok = out.Err.(*LimitError)
	require.True(t, ok, "after a restart too, not %v", out.Err)
	require.Equal(t, LimitMemory, lim.Kind)
}

// TestDockerDiskQuotaStopsTheTurn is the Security issue's acceptance for disk_mb on an engine that
// cannot cap volumes: a turn that keeps writing past the quota is stopped while it runs, with the
// disk limit as its error, and the host disk is spared (the overshoot is bounded by one check
// interval). A turn that starts over the quota may still clean up.
func TestDockerDiskQuotaStopsTheTurn(t *testing.T) {
	f := newLimitFixture(t, 1024)
	sink := newCollector()
	// Files of 64 MiB each, forever: only the quota ends it (no single file reaches disk_mb).
	submit(t, f.pool, "web:disk", "e1",
		`i=0; while :; do i=$((i+1)); dd if=/dev/zero of=f$i bs=1M count=64 2>/dev/null || exit 1; done`, sink)
	out := sink.wait(t, 1)[0]
	lim, ok := out.Err.(*LimitError)
	require.True(t, ok, "the turn ended with the limit, not %v", out.Err)
	require.Equal(t, LimitDisk, lim.Kind)
	require.True(t, lim.Stopped, "stopped while it ran")
	require.Greater(t, lim.UsedKB, int64(1024)<<10)
	require.Less(t, lim.UsedKB, int64(3072)<<10, "the overshoot is bounded")

	submit(t, f.pool, "web:disk", "e2", "rm -f f*; echo cleaned", sink)
	out = sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "cleaned", out.Answer)
}
