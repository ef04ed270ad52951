package deno

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBoxIDsAndSlugs(t *testing.T) {
	now := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	id := newBoxID("prod", now)
	require.True(t, validBoxID(id), id)
	require.True(t, strings.HasPrefix(id, boxPrefix("prod")))
	require.NotEqual(t, boxPrefix("prod"), boxPrefix("staging"), "each deployment has its own prefix")
	require.Equal(t, now, boxTime(id), "the id carries its creation time")
	for _, n := range []int{1, 9, 123456} {
		for _, slug := range []string{volSlug(id, n), snapSlug(id, n)} {
			require.LessOrEqual(t, len(slug), 32, slug)
			require.True(t, validRoot(slug), "%s is a valid Deno slug", slug)
			gid, _, gn, ok := parseSlug(slug)
			require.True(t, ok)
			require.Equal(t, id, gid)
			require.Equal(t, n, gn)
		}
	}
	for _, bad := range []string{"tbx-v1", id + "-x1", id + "-v01", id + "-v", "other-s2"} {
		_, _, _, ok := parseSlug(bad)
		require.False(t, ok, bad)
	}
	for slug, ok := range map[string]bool{"builtin:debian-13": true, "tb-base": true, "a": false, "ab--cd": false,
		"Upper": false, "threadbox/sandbox:latest": false, strings.Repeat("x", 33): false, "-x": false} {
		require.Equal(t, ok, validRoot(slug), slug)
	}
}

func TestLimitIsRecognised(t *testing.T) {
	for _, tc := range []struct {
		status    int
		code, msg string
		limit     bool
	}{
		{429, "SANDBOX_LIMIT_EXCEEDED", "concurrent sandbox limit reached", true},
		{403, "QUOTA_EXCEEDED", "quota", true},
		{429, "RATE_LIMITED", "slow down", false},
		{500, "INTERNAL_SERVER_ERROR", "limit", false},
		{400, "INVALID_ROOT", "volume is not bootable", false},
	} {
		require.Equal(t, tc.limit, isLimit(tc.status, tc.code, tc.msg), "%+v", tc)
	}
}
