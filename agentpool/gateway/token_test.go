package gateway

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestToken: a token names its thread and generation and verifies only under its secret, unchanged.
func TestToken(t *testing.T) {
	tok := Token("s3cret", "slack:T1:C1:1700000000.000100", 7)
	thread, gen, err := ParseToken("s3cret", tok)
	require.NoError(t, err)
	require.Equal(t, "slack:T1:C1:1700000000.000100", thread)
	require.EqualValues(t, 7, gen)
	require.NotEqual(t, tok, Token("s3cret", "slack:T1:C1:1700000000.000100", 8), "each generation has its own")

	parts := strings.Split(tok, ".")
	bad := []struct{ name, tok, secret string }{
		{"other secret", tok, "other"},
		{"empty", "", "s3cret"},
		{"other generation, same mac", strings.Join([]string{parts[0], parts[1], "8", parts[3]}, "."), "s3cret"},
		{"other thread, same mac", strings.Join([]string{parts[0], "d2ViOng", parts[2], parts[3]}, "."), "s3cret"},
		{"generation zero", Token("s3cret", "web:x", 0), "s3cret"},
		{"wrong prefix", "tbg2" + strings.TrimPrefix(tok, "tbg1"), "s3cret"},
		{"too few parts", strings.Join(parts[:3], "."), "s3cret"},
		{"a real key", "sk-ant-api03-xyz", "s3cret"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseToken(tc.secret, tc.tok)
			require.ErrorIs(t, err, ErrBadToken)
		})
	}
}
