package agentpool

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimitReadingsAreDropped: readings of sandboxes that ran no turn for a day are swept, so the
// readings held are bounded by the sandboxes in use, not by every sandbox the process saw; recent
// ones stay.
func TestLimitReadingsAreDropped(t *testing.T) {
	var s limitState
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range limitSweepEvery - 1 {
		s.store(fmt.Sprint("old-", i), limitReading{diskKB: int64(i)}, start)
	}
	r, ok := s.load("old-7")
	require.True(t, ok)
	require.EqualValues(t, 7, r.diskKB)

	// A day and a minute later, one sandbox is still in use; the sweep comes with the next store.
	later := start.Add(limitReadingTTL + time.Minute)
	s.store("old-7", limitReading{diskKB: 70}, later)
	require.Equal(t, 1, s.len(), "only the reading taken within the day is left")
	r, ok = s.load("old-7")
	require.True(t, ok)
	require.EqualValues(t, 70, r.diskKB)
	_, ok = s.load("old-8")
	require.False(t, ok)

	// Readings younger than a day survive a sweep.
	for i := range limitSweepEvery {
		s.store(fmt.Sprint("new-", i), limitReading{}, later.Add(time.Hour))
	}
	require.Equal(t, limitSweepEvery+1, s.len())
}
