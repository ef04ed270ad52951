package gateway

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseTokenCanonicalOnly: a token has one spelling; a generation written "+1" or "01" (which
// strconv accepts) is refused, though its MAC is that of generation 1.
func TestParseTokenCanonicalOnly(t *testing.T) {
	tok := Token("s", "k", 1)
	_, _, err := ParseToken("s", tok)
	require.NoError(t, err)
	parts := strings.Split(tok, ".")
	for _, gen := range []string{"+1", "01", "001"} {
		alt := strings.Join([]string{parts[0], parts[1], gen, parts[3]}, ".")
		_, _, err := ParseToken("s", alt)
		require.ErrorIs(t, err, ErrBadToken, gen)
	}
}
