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

// TestParseTokenStrictBase64: the thread key and MAC parts have one spelling too. Lenient base64
// ignores the unused low bits of the last character and skips line breaks, so "k" (encoded "aw")
// also read as "ax", and the MAC likewise.
func TestParseTokenStrictBase64(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	tok := Token("s", "k", 1)
	parts := strings.Split(tok, ".")
	// lowBits sets an unused low bit of the part's last character: the same bytes, another spelling.
	lowBits := func(p string) string {
		i := strings.IndexByte(alphabet, p[len(p)-1])
		require.Zero(t, i&1, "a canonical last character has its unused bits clear")
		return p[:len(p)-1] + string(alphabet[i|1])
	}
	for name, alt := range map[string][4]string{
		"key low bits": {parts[0], lowBits(parts[1]), parts[2], parts[3]},
		"mac low bits": {parts[0], parts[1], parts[2], lowBits(parts[3])},
		"key newline":  {parts[0], parts[1][:1] + "\n" + parts[1][1:], parts[2], parts[3]},
		"mac newline":  {parts[0], parts[1], parts[2], parts[3][:5] + "\r\n" + parts[3][5:]},
	} {
		_, _, err := ParseToken("s", strings.Join(alt[:], "."))
		require.ErrorIs(t, err, ErrBadToken, name)
	}
}
