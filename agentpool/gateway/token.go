package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// tokenPrefix versions the token format, so a later scheme can be told apart.
const tokenPrefix = "tbg1"

// ErrBadToken is a token that is malformed or was not made with this secret.
var ErrBadToken = errors.New("invalid gateway token")

// Token is the sandbox token of one thread's sandbox generation:
// tbg1.<base64url(thread key)>.<generation>.<base64url(HMAC-SHA256(secret, thread key, generation))>.
//
// It is derived, not stored: any replica with the secret checks it, a bot restart derives the same
// one, and it says which thread it belongs to. It is revoked by the session row, not by a list: the
// gateway refuses it unless the thread's session is live in exactly this generation, so destroying or
// recreating the sandbox ends it.
func Token(secret, threadKey string, generation int64) string {
	return tokenPrefix + "." + base64.RawURLEncoding.EncodeToString([]byte(threadKey)) + "." +
		strconv.FormatInt(generation, 10) + "." + base64.RawURLEncoding.EncodeToString(tokenMAC(secret, threadKey, generation))
}

func tokenMAC(secret, threadKey string, generation int64) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	// The NUL keeps "a"+"12" and "a1"+"2" apart; thread keys never contain one.
	fmt.Fprintf(mac, "threadbox/gateway/%s\x00%d", threadKey, generation)
	return mac.Sum(nil)
}

// ParseToken checks tok against secret and returns the thread and generation it was made for.
func ParseToken(secret, tok string) (threadKey string, generation int64, err error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || parts[0] != tokenPrefix {
		return "", 0, ErrBadToken
	}
	key, err := decodePart(parts[1])
	if err != nil || len(key) == 0 {
		return "", 0, ErrBadToken
	}
	gen, err := strconv.ParseInt(parts[2], 10, 64)
	// Canonical digits only: strconv also reads "+1" and "01", which would give one token several
	// spellings.
	if err != nil || gen < 1 || strconv.FormatInt(gen, 10) != parts[2] {
		return "", 0, ErrBadToken
	}
	mac, err := decodePart(parts[3])
	if err != nil || !hmac.Equal(mac, tokenMAC(secret, string(key), gen)) {
		return "", 0, ErrBadToken
	}
	return string(key), gen, nil
}

// decodePart decodes a token part, in its one spelling only: lenient base64 ignores the unused low
// bits of the last character (and Strict still skips line breaks), which would give one token
// several spellings.
func decodePart(part string) ([]byte, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(part)
	if err == nil && base64.RawURLEncoding.EncodeToString(raw) != part {
		err = errors.New("not canonical base64")
	}
	return raw, err
}
