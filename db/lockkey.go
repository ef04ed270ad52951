package db

import "hash/fnv"

// lockKey maps a lock name to a Postgres advisory-lock key: the 64-bit FNV-1a hash of
// namespace, a NUL byte, kind, a NUL byte and name, read as a signed int64.
//
// The hash must never change: processes of different versions that share a database must compute the
// same key for the same thread. A collision makes two threads share a lock, which costs waiting but
// never correctness; at 64 bits it is negligible. The NUL separators keep ("a", "bc") and ("ab", "c")
// apart.
func lockKey(namespace, kind, name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(namespace))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(kind))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64()) //nolint:gosec // the bits are the key; the sign does not matter.
}

// Lock kinds. The leader and the migration lock have a fixed name.
const (
	lockKindThread  = "thread"
	lockKindLeader  = "leader"
	lockKindMigrate = "migrate"
	// lockKindInstance is a process instance's liveness lock.
	lockKindInstance = "instance"
)

// ThreadLockHolders is the SQL that lists the backends (pid) holding a thread's lock on PostgreSQL,
// with ThreadLockArgs as its arguments: for operators ("who holds this thread?") and for tests that
// kill the holder. A bigint advisory key shows in pg_locks split into classid (high half) and objid
// (low half), objsubid 1.
const ThreadLockHolders = `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
	AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1`

// ThreadLockArgs returns ThreadLockHolders' arguments for threadKey on s, and false when s is not a
// PostgreSQL store.
func ThreadLockArgs(s Store, threadKey string) ([]any, bool) {
	ps, ok := s.(*pgStore)
	if !ok {
		return nil, false
	}
	u := uint64(lockKey(ps.ns, lockKindThread, threadKey))
	return []any{int64(u >> 32), int64(u & 0xffffffff)}, true
}
