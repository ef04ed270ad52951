package main

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// TestGCPolicy: the binary runs its collector at serverGOGC with a soft limit under the process's
// memory limit, and GOGC or GOMEMLIMIT in the environment win over each.
func TestGCPolicy(t *testing.T) {
	const gib = int64(1) << 30
	share := func(n int64) int64 { return int64(float64(n) * memLimitShare) }
	for _, tc := range []struct {
		name   string
		env    map[string]string
		max    int64 // the cgroup's limit; 0 for none
		expect gcPolicy
	}{
		{"no environment, no limit", nil, 0, gcPolicy{Percent: serverGOGC}},
		{"a container limit", nil, gib, gcPolicy{Percent: serverGOGC, Limit: share(gib)}},
		{"GOGC set", map[string]string{"GOGC": "100"}, gib, gcPolicy{Limit: share(gib)}},
		{"GOGC off", map[string]string{"GOGC": "off"}, 0, gcPolicy{}},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "300MiB"}, gib, gcPolicy{Percent: serverGOGC}},
		{"both set", map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}, gib, gcPolicy{}},
		{"a limit too small to share", nil, 32 << 20, gcPolicy{Percent: serverGOGC}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := gcPolicyFor(func(k string) string { return tc.env[k] }, func() (int64, bool) { return tc.max, tc.max > 0 })
			require.Equal(t, tc.expect, got)
		})
	}
}

func TestParseMemoryMax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"536870912\n", 536870912, true},
		{"max\n", 0, false},                 // cgroup v2: no limit
		{"9223372036854771712\n", 0, false}, // cgroup v1: no limit
		{"", 0, false},
		{"-1", 0, false},
		{"12abc", 0, false},
	} {
		got, ok := parseMemoryMax(tc.in)
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// TestMemoryMaxIn: the tightest limit on the process's cgroup and its parents, cgroup v2 first,
// then v1's memory controller; none where no level sets one.
func TestMemoryMaxIn(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name string
		fs   fstest.MapFS
		want int64
		ok   bool
	}{
		{"v2, namespaced: the root is the container", fstest.MapFS{
			"proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("536870912\n"),
		}, 536870912, true},
		{"v2, no limit", fstest.MapFS{
			"proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("max\n"),
		}, 0, false},
		{"v2, the host's view: the limit on a parent (a pod)", fstest.MapFS{
			"proc/self/cgroup":                           file("0::/kubepods/pod1/ctr\n"),
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": file("max\n"),
			"sys/fs/cgroup/kubepods/pod1/memory.max":     file("1073741824\n"),
			"sys/fs/cgroup/kubepods/memory.max":          file("8589934592\n"),
		}, 1073741824, true},
		{"v2, the container tighter than its pod", fstest.MapFS{
			"proc/self/cgroup":                           file("0::/kubepods/pod1/ctr\n"),
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": file("268435456\n"),
			"sys/fs/cgroup/kubepods/pod1/memory.max":     file("1073741824\n"),
		}, 268435456, true},
		{"v1", fstest.MapFS{
			"proc/self/cgroup": file("12:pids:/docker/abc\n9:cpuset:/docker/abc\n4:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("402653184\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":            file("9223372036854771712\n"),
		}, 402653184, true},
		{"v1, namespaced", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("402653184\n"),
		}, 402653184, true},
		{"nothing readable", fstest.MapFS{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := memoryMaxIn(tc.fs)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}
