package runtime

import "math"

// Bounds on the usage a runtime reports. The numbers come from inside the sandbox (the agent's own
// process prints them), and they are stored with the turn, where the model gateway's budgets sum
// them in SQL (a bigint sum that overflows fails every budget check of the thread). A real turn uses
// millions of tokens and dollars, not more.
const (
	MaxUsageTokens  = 1 << 40
	MaxUsageCostUSD = 1e6
)

// SumTokens adds token counts a runtime parsed: a negative count counts as 0, and the sum stops at
// MaxUsageTokens (it cannot overflow).
func SumTokens(counts ...int64) int64 {
	var sum int64
	for _, c := range counts {
		sum += min(max(c, 0), MaxUsageTokens)
		sum = min(sum, MaxUsageTokens)
	}
	return sum
}

// SumCost adds costs in USD a runtime parsed: a negative or non-finite one counts as 0, and the sum
// stops at MaxUsageCostUSD.
func SumCost(costs ...float64) float64 {
	var sum float64
	for _, c := range costs {
		if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
			continue
		}
		sum = min(sum+min(c, MaxUsageCostUSD), MaxUsageCostUSD)
	}
	return sum
}
