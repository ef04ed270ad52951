package runtime

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSumTokensAndCost(t *testing.T) {
	require.Equal(t, int64(12), SumTokens(5, 7))
	require.Equal(t, int64(7), SumTokens(-5, 7), "a negative count is 0")
	require.Equal(t, int64(MaxUsageTokens), SumTokens(math.MaxInt64, math.MaxInt64), "no overflow")
	require.Equal(t, int64(0), SumTokens())
	require.Equal(t, 0.75, SumCost(0.25, 0.5))
	require.Equal(t, 0.5, SumCost(-3, 0.5, math.NaN(), math.Inf(1)))
	require.Equal(t, MaxUsageCostUSD, SumCost(math.MaxFloat64, 1))
}
