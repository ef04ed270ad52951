package db_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// TestPostgresWarmPoolsShortOfConnectionsEveryPoolWorks (from a review of the fixed-size pools): a
// pool at MinConns never closes an idle connection, so fixed-size pools short of connections kept
// what they got for good, and a pool that got none could never open one while the server stayed at
// its limit (every turn's lock, or every ack, failing with SQLSTATE 53300). Here the role may open
// 3 connections for four pools: a short replica falls back to pools that grow on demand and give
// idle connections back (shortIdle), so each pool gets one in its turn: slower, never cut off.
func TestPostgresWarmPoolsShortOfConnectionsEveryPoolWorks(t *testing.T) {
	defer db.SetWarmWait(time.Second)()
	defer db.SetShortIdle(100 * time.Millisecond)()
	u, admin, role := limitedRole(t, 3)

	var opened, wanted int
	st, err := db.Open(pgCtx(t), u.String(), db.WithLockConns(16), db.WithWarmPools(func(o, w int) { opened, wanted = o, w }))
	require.NoError(t, err, "too few connections is no failure")
	t.Cleanup(func() { _ = st.Close() })
	t.Logf("opened %d of %d", opened, wanted)
	rows, err := admin.Query(pgCtx(t), "SELECT application_name, count(*) FROM pg_stat_activity WHERE usename = $1 GROUP BY 1", role)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		var c int
		require.NoError(t, rows.Scan(&n, &c))
		t.Logf("%s: %d", n, c)
	}
	require.NoError(t, rows.Err())
	require.Less(t, opened, wanted, "the shortfall is reported")

	// Every pool runs a statement, one after the other: a pool that finds the server full gets a
	// connection once another pool's idle one has gone back (polled: the server's state, not ours).
	for _, pool := range []string{"query", "locks", "intake", "relaxed", "query"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := db.PoolSetting(pgCtx(t), st, pool, "synchronous_commit")
			assert.NoError(c, err)
		}, 10*time.Second, 20*time.Millisecond, "pool %s never got a connection", pool)
	}
	require.Eventually(t, func() bool {
		_, err = st.TurnInsert(pgCtx(t), db.NewTurn{ThreadKey: "t", PlatformEventID: "e1", UserID: "u", Prompt: "p", Owner: "o"})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "a message's ack")
}
