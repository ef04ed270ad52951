// Package retryafter reads an HTTP Retry-After header for the providers' REST retries (Daytona,
// Deno): one parser, so both forms and the cap hold in every provider alike.
package retryafter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Max caps a server's Retry-After: a hostile or broken answer must not park a caller (whose ctx may
// have no deadline) for days.
const Max = 30 * time.Second

// Parse reads Retry-After in either form of RFC 9110 §10.2.3, delta-seconds or HTTP-date (measured
// from now), capped at Max; absent, unreadable or past is 0.
func Parse(s string, now time.Time) time.Duration {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseUint(s, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if n >= uint64(Max/time.Second) { // past uint64, n is its maximum: a long wait, not none
			return Max
		}
		d = time.Duration(n) * time.Second
	} else if at, err := http.ParseTime(s); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), Max)
}
