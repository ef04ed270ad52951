package sandboxtest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// testEnv: a blocked variable never reaches the sandbox, whether it came through the policy's
// passthrough or set, or was put straight into Spec.Env (defence in depth: the provider normalizes).
func (s *suite) testEnv(t *testing.T) {
	host := map[string]string{
		"AWS_SECRET_ACCESS_KEY": "leak-aws-passthrough",
		"TB_CUSTOM_SECRET":      "leak-custom-passthrough",
		"TB_PASSED":             "passed value",
	}
	policy := sandbox.EnvPolicy{
		Passthrough: []string{"AWS_SECRET_ACCESS_KEY", "TB_CUSTOM_SECRET", "TB_PASSED", "TB_UNSET_ON_HOST"},
		Set:         map[string]string{"DATABASE_URL": "leak-db-set", "TB_CUSTOM_TOKEN": "leak-custom-set", "TB_SET": "set value"},
		Blocked:     []string{"TB_CUSTOM_*"},
	}
	env, blocked, err := policy.Resolve(func(k string) (string, bool) { v, ok := host[k]; return v, ok })
	require.NoError(t, err)
	require.Equal(t, []string{"AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "TB_CUSTOM_SECRET", "TB_CUSTOM_TOKEN"}, blocked)

	spec := s.spec(t)
	spec.Env = env
	spec.Env["AWS_SECRET_ACCESS_KEY"] = "leak-aws-direct"
	spec.Env["OPENAI_API_KEY"] = "leak-model-key-direct"
	spec.Env["TB_CUSTOM_DIRECT"] = "leak-custom-direct"
	spec.BlockedEnv = []string{"TB_CUSTOM_*"}
	h := s.create(t, spec)

	got := s.ok(t, h, "env")
	for _, line := range strings.Split(got, "\n") {
		require.NotContains(t, line, "leak", "blocked variable visible inside: %q", line)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(got, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	require.Equal(t, "passed value", vars["TB_PASSED"])
	require.Equal(t, "set value", vars["TB_SET"])
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "OPENAI_API_KEY", "TB_CUSTOM_SECRET", "TB_CUSTOM_TOKEN", "TB_CUSTOM_DIRECT", "TB_UNSET_ON_HOST"} {
		require.NotContains(t, vars, k)
	}
}

// testLimits: memory, cpus and pids limits are applied (seen from inside through the cgroup, and
// from Inspect where the provider reports them), and commands run as uid 1000.
func (s *suite) testLimits(t *testing.T) {
	if !s.caps.Limits {
		t.Skip("provider declares no resource limits")
	}
	spec := s.spec(t)
	spec.Resources = sandbox.Resources{MemoryMB: 512, CPUs: 0.5, PIDs: 64, ExecTimeout: time.Minute}
	h := s.create(t, spec)

	info, err := s.p.Inspect(t.Context(), h)
	require.NoError(t, err)
	if info.Resources != (sandbox.Resources{}) {
		require.Equal(t, 512, info.Resources.MemoryMB)
		require.InDelta(t, 0.5, info.Resources.CPUs, 0.001)
		require.Equal(t, 64, info.Resources.PIDs)
	}

	// cgroup v2 file first, then v1.
	mem := s.ok(t, h, "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
	require.Equal(t, strconv.Itoa(512<<20), mem, "memory limit inside")
	pids := s.ok(t, h, "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max")
	require.Equal(t, "64", pids, "pids limit inside")
	cpu := s.ok(t, h, `cat /sys/fs/cgroup/cpu.max 2>/dev/null ||
echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"`)
	quota, period, ok := strings.Cut(cpu, " ")
	require.True(t, ok, "cpu quota %q", cpu)
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	require.NoError(t, err1, "cpu quota %q", cpu)
	require.NoError(t, err2, "cpu period %q", cpu)
	require.InDelta(t, 0.5, q/p, 0.001, "cpus inside")

	if s.caps.Users {
		require.Equal(t, "1000 1000", s.ok(t, h, `echo "$(id -u) $(id -g)"`), "non-root by default")
	}
	if sr, ok := s.p.(sandbox.StatsReader); ok {
		st, err := sr.Stats(t.Context(), h)
		require.NoError(t, err)
		require.Equal(t, uint64(512<<20), st.MemoryLimit)
		require.NotZero(t, st.MemoryBytes)
		require.NotZero(t, st.PIDs)
		require.GreaterOrEqual(t, st.CPUPercent, 0.0)
		st, err = sr.Stats(t.Context(), h)
		require.NoError(t, err, "a second reading (with a previous sample)")
		require.GreaterOrEqual(t, st.CPUPercent, 0.0)
	}
}

// testNetworkNone: network none leaves loopback only; full gives an interface besides it.
func (s *suite) testNetworkNone(t *testing.T) {
	if !s.caps.NetworkNone {
		t.Skip("provider declares no network isolation")
	}
	h := s.create(t, s.spec(t))
	require.Equal(t, "lo", s.ok(t, h, "ls /sys/class/net"))

	spec := s.spec(t)
	spec.Network = sandbox.NetworkFull
	full := s.create(t, spec)
	ifaces := strings.Fields(s.ok(t, full, "ls /sys/class/net"))
	require.Contains(t, ifaces, "lo")
	require.Greater(t, len(ifaces), 1, "network full has an interface besides lo: %v", ifaces)
	info, err := s.p.Inspect(t.Context(), full)
	require.NoError(t, err)
	require.Equal(t, sandbox.NetworkFull, info.Network)
}

// testReadOnlyRoot: / is read-only, /tmp and the work directory are writable, the work directory
// is the user's, and it survives stop/start.
func (s *suite) testReadOnlyRoot(t *testing.T) {
	if !s.caps.ReadOnlyRoot {
		t.Skip("provider declares no read-only root")
	}
	ctx := t.Context()
	spec := s.spec(t)
	spec.ReadOnlyRoot = true
	h := s.create(t, spec)

	_, _, res := s.sh(t, h, "touch /etc/threadbox-ro-probe")
	require.NotEqual(t, 0, res.ExitCode, "writing under / must fail")
	s.ok(t, h, "echo tmp > /tmp/x && cat /tmp/x && echo work > in-workdir && cat in-workdir")
	require.Equal(t, "1000:1000", s.ok(t, h, "stat -c %u:%g .")) // the work directory
	require.NoError(t, s.p.WriteFile(ctx, h, "sub/written.txt", []byte("via the provider"), 0o644))
	require.Equal(t, "via the provider", s.ok(t, h, "cat sub/written.txt"))
	require.NoError(t, s.p.Stop(ctx, h))
	require.NoError(t, s.p.Start(ctx, h))
	require.Equal(t, "work", s.ok(t, h, "cat in-workdir"))
	data, err := s.p.ReadFile(ctx, h, "sub/written.txt", 1024)
	require.NoError(t, err)
	require.Equal(t, "via the provider", string(data))
}
