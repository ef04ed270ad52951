package sandbox

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestClipText(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"short", "gone", "gone"},
		{"at the cap", strings.Repeat("a", 10), strings.Repeat("a", 10)},
		{"one past", strings.Repeat("a", 11), strings.Repeat("a", 10) + "…"},
		{"megabytes", strings.Repeat("a", 1<<20), strings.Repeat("a", 10) + "…"},
		{"runes", strings.Repeat("é", 11), strings.Repeat("é", 10) + "…"},
		// 4-byte runes: the byte cut (40 bytes) holds exactly 10 runes, yet the text was longer.
		{"cut at the byte bound", strings.Repeat("😀", 12), strings.Repeat("😀", 10) + "…"},
		// The byte cut splits a rune: what is left is still valid text.
		{"split rune", "a" + strings.Repeat("😀", 12), "a" + strings.Repeat("😀", 9) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ClipText(tc.in, 10)
			require.Equal(t, tc.want, got)
			require.True(t, utf8.ValidString(got))
		})
	}
}
