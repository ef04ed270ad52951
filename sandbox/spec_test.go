package sandbox

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResourcesValidateEdges(t *testing.T) {
	ok := DefaultResources()
	with := func(f func(*Resources)) Resources { r := ok; f(&r); return r }
	for _, tc := range []struct {
		name  string
		r     Resources
		valid bool
	}{
		{"defaults", ok, true},
		{"cpus at the bounds", with(func(r *Resources) { r.CPUs = CPUsRange[0] }), true},
		{"cpus upper bound", with(func(r *Resources) { r.CPUs = CPUsRange[1] }), true},
		// NaN compares false with both bounds: it passed, and int64(NaN*1e9) is a platform-defined
		// NanoCPUs (0, no limit at all, on arm64).
		{"cpus NaN", with(func(r *Resources) { r.CPUs = math.NaN() }), false},
		{"cpus +Inf", with(func(r *Resources) { r.CPUs = math.Inf(1) }), false},
		{"cpus -Inf", with(func(r *Resources) { r.CPUs = math.Inf(-1) }), false},
		{"cpus below", with(func(r *Resources) { r.CPUs = 0.49 }), false},
		{"tmp equal to memory", with(func(r *Resources) { r.MemoryMB, r.TmpMB = 1024, 1024 }), true},
		{"tmp above memory", with(func(r *Resources) { r.MemoryMB, r.TmpMB = 1024, 1025 }), false},
		{"pids below", with(func(r *Resources) { r.PIDs = PIDsRange[0] - 1 }), false},
		{"memory above", with(func(r *Resources) { r.MemoryMB = MemoryMBRange[1] + 1 }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate(nil)
			if tc.valid {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}
