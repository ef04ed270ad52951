package claudecode

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// TestUsageIsBounded: the result line's numbers come from a process in the sandbox; huge ones must
// not overflow into a negative count, negative ones must not lower what a turn cost.
func TestUsageIsBounded(t *testing.T) {
	tests := []struct {
		name  string
		usage string
		want  runtime.Usage
	}{
		{"plain", `"usage":{"input_tokens":3,"cache_read_input_tokens":4,"output_tokens":5},"total_cost_usd":0.5`,
			runtime.Usage{InputTokens: 7, OutputTokens: 5, CostUSD: 0.5}},
		{"overflowing", `"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807,"output_tokens":9223372036854775807},"total_cost_usd":1e300`,
			runtime.Usage{InputTokens: runtime.MaxUsageTokens, OutputTokens: runtime.MaxUsageTokens, CostUSD: runtime.MaxUsageCostUSD}},
		{"negative", `"usage":{"input_tokens":-100,"cache_read_input_tokens":4,"output_tokens":-5},"total_cost_usd":-2`,
			runtime.Usage{InputTokens: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := `{"type":"result","subtype":"success","is_error":false,"result":"ok",` + tt.usage + "}\n"
			res, err := New(Config{}).Prompt(t.Context(), printingSandbox{stdout: out},
				"123e4567-e89b-42d3-a456-426614174000", runtime.Prompt{Text: "hi"}, nil)
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Usage)
		})
	}
}
