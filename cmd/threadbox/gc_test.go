package main

import (
	"testing"

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
