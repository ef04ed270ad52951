package retryafter

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParse: Retry-After in delta-seconds and in HTTP-date form, capped; a date past or unreadable
// is no wait.
func TestParse(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":    0,
		"7":   7 * time.Second,
		" 7 ": 7 * time.Second,
		"0":   0,
		"-3":  0,
		"abc": 0,
		"1.5": 0,
		now.Add(12 * time.Second).Format(http.TimeFormat): 12 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
		now.Add(48 * time.Hour).Format(http.TimeFormat):   Max,
		"999999":                  Max,
		"9999999999":              Max, // past what a Duration holds in seconds: no wrap
		"99999999999999999999999": Max, // past uint64
	} {
		require.Equal(t, want, Parse(in, now), "Retry-After: %q", in)
	}
}
