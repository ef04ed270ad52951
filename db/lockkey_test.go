package db_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// TestLockKeyStable pins the advisory-lock hash: replicas of different versions sharing a database
// must agree on every key, so these values may never change. They were computed independently of
// this code (FNV-1a 64 over namespace NUL kind NUL name, as a two's-complement int64).
func TestLockKeyStable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ns, kind, name string
		want           int64
	}{
		{"public", "thread", "slack:T1:C1:1700000000.000100", -640214121329160954},
		{"public", "leader", "", 5413502666638208947},
		{"", "thread", "", -1934788945552229571},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, db.LockKey(tc.ns, tc.kind, tc.name), "%q %q %q", tc.ns, tc.kind, tc.name)
	}
	require.NotEqual(t, db.LockKey("a", "thread", "bc"), db.LockKey("ab", "thread", "c"))
	require.NotEqual(t, db.LockKey("s1", "thread", "k"), db.LockKey("s2", "thread", "k"))
}
