package bot

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
)

func TestLimitErrorsReadAsLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"memory", &agentpool.LimitError{Kind: agentpool.LimitMemory, LimitMB: 512},
			[]string{"hit the 512 MiB memory limit", "sandbox.resources.memory_mb"}},
		{"disk, stopped", fmt.Errorf("turn: %w", &agentpool.LimitError{Kind: agentpool.LimitDisk, LimitMB: 1024, UsedKB: 1200 << 10, Stopped: true}),
			[]string{"over its 1024 MiB disk limit", "1.2 GiB", "stopped the turn", `"reset"`}},
		{"disk, after the turn", &agentpool.LimitError{Kind: agentpool.LimitDisk, LimitMB: 1024, UsedKB: 1100 << 10},
			[]string{"is over its 1024 MiB disk limit", "Delete files"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Explain(nil, "turn failed", tc.err)
			require.Equal(t, agentpool.ELIMIT, p.Code)
			require.Empty(t, p.Ref, "nothing to look up")
			got := p.String()
			for _, w := range tc.want {
				require.Contains(t, got, w)
			}
		})
	}
}
