package docker_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestDiskAndTmpLimits: no file can grow past disk_mb (a dd past it fails, the file stops at the
// limit), and a read-only root's /tmp is a tmpfs of tmp_mb that runs nothing.
func TestDiskAndTmpLimits(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	spec := testSpec(t)
	spec.ReadOnlyRoot = true
	spec.Resources = sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 64, DiskMB: 1024, TmpMB: 32, ExecTimeout: sandbox.ExecTimeoutRange[1]}
	h := create(t, p, spec)

	var out strings.Builder
	res, err := p.Exec(t.Context(), h, sandbox.ExecRequest{
		Cmd:    []string{"sh", "-c", "dd if=/dev/zero of=big bs=1M count=1100 2>&1; echo exit=$?"},
		Stdout: &out,
	})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.NotContains(t, out.String(), "exit=0", "dd past disk_mb fails: %s", out.String())
	require.Equal(t, "1073741824", sh(t, p, h, "stat -c %s big"), "the file stops at the limit")
	sh(t, p, h, "rm big")

	mount := sh(t, p, h, "grep ' /tmp ' /proc/mounts")
	require.Contains(t, mount, "tmpfs")
	require.Contains(t, mount, "noexec")
	require.Contains(t, mount, "size=32768k")
	res, err = p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"sh", "-c", "cp /bin/busybox /tmp/bb && /tmp/bb true"}})
	require.NoError(t, err)
	require.NotZero(t, res.ExitCode, "nothing runs from /tmp")
}

// TestStorageQuotaIsWhatTheEngineSays: the provider reads the storage driver from the engine and says
// whether it can cap container layers; on an engine without quota support, creates still work.
func TestStorageQuotaIsWhatTheEngineSays(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	_, detail := p.StorageQuota()
	require.NotEmpty(t, detail)
	spec := testSpec(t)
	spec.Resources = sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 64, DiskMB: 1024, ExecTimeout: sandbox.ExecTimeoutRange[1]}
	h := create(t, p, spec) // the engine refuses --storage-opt without xfs pquota: the provider retries without
	require.Equal(t, "ok", sh(t, p, h, "echo ok"))
	supported, detail := p.StorageQuota()
	if strings.Contains(detail, "extfs") || strings.Contains(detail, "refused") {
		require.False(t, supported, detail)
	}
}
