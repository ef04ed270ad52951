package db_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// TestPostgresWarmPools: with WithWarmPools, Open returns with every pool full (fixed-size pools),
// and reports so; without it, the intake has none and the lock pool at most the one migrating used.
func TestPostgresWarmPools(t *testing.T) {
	t.Parallel()
	var opened, wanted int // what the warm store reported; only its subtest uses them
	for _, tc := range []struct {
		name                 string
		opts                 []db.Option
		query, intake, locks int
	}{
		{"warm", []db.Option{db.WithWarmPools(func(o, w int) { opened, wanted = o, w }), db.WithLockConns(16)}, 8, 2, 16},
		{"cold", []db.Option{db.WithLockConns(16)}, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(dbtest.PostgresSchemaURL(t))
			require.NoError(t, err)
			// A name of its own, to count this store's connections among every test's.
			app := fmt.Sprintf("warm%d", time.Now().UnixNano())
			q := u.Query()
			q.Set("application_name", app)
			u.RawQuery = q.Encode()
			adminURL := u.String()
			q.Set("pool_max_conns", "8")
			u.RawQuery = q.Encode()
			dbtest.OpenURL(t, u.String(), append([]db.Option{db.WithMigrate()}, tc.opts...)...)

			admin, err := pgx.Connect(pgCtx(t), adminURL)
			require.NoError(t, err)
			t.Cleanup(func() { _ = admin.Close(pgCtx(t)) })
			count := func(name string) int {
				var n int
				require.NoError(t, admin.QueryRow(pgCtx(t),
					"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n))
				return n
			}
			// The admin connection carries the same name: not counted.
			if tc.name == "warm" {
				// pgxpool opens them in the background, and Open waits for them without opening more
				// of its own; Open's ping and the migration may each have used one besides.
				require.GreaterOrEqual(t, count(app)-1, tc.query, "query pool")
				require.LessOrEqual(t, count(app)-1, tc.query+1, "query pool")
				require.Equal(t, tc.intake, count(app+"-intake"), "intake")
				require.GreaterOrEqual(t, count(app+"-locks"), tc.locks, "lock pool")
				require.LessOrEqual(t, count(app+"-locks"), tc.locks+1, "lock pool")
				require.Equal(t, 4, count(app+"-relaxed"), "relaxed pool")
				require.Equal(t, 8+16+2+4, wanted, "reported: every pool full")
				require.Equal(t, wanted, opened, "reported: all opened in time")
				return
			}
			require.Equal(t, tc.intake, count(app+"-intake"), "intake")
			require.LessOrEqual(t, count(app+"-locks"), tc.locks, "lock pool: the one migrating used at most")
			require.Zero(t, count(app+"-relaxed"), "relaxed pool")
		})
	}
}

// TestPostgresWarmPoolsShortOfConnections: a server that lets the store open fewer connections than
// its pools want (max_connections, or here a role's connection limit) does not stop Open: it returns
// once the wait is over, and reports the shortfall for serve to warn about.
func TestPostgresWarmPoolsShortOfConnections(t *testing.T) {
	defer db.SetWarmWait(time.Second)()
	u, _, _ := limitedRole(t, 6)

	var opened, wanted int
	st, err := db.Open(pgCtx(t), u.String(), db.WithLockConns(16), db.WithWarmPools(func(o, w int) { opened, wanted = o, w }))
	require.NoError(t, err, "too few connections is no failure")
	t.Cleanup(func() { _ = st.Close() })
	require.Equal(t, 8+16+2+4, wanted)
	require.LessOrEqual(t, opened, 6, "the role's limit")
	require.Less(t, opened, wanted, "the shortfall is reported")
	require.NoError(t, st.Ping(pgCtx(t)), "and the store works with what it has")
}

// TestPostgresRelaxedWrites: only the relaxed pool's connections skip waiting for the disk; the
// ack's insert, the turn's start and outcome (intake and query pools) wait for it.
func TestPostgresRelaxedWrites(t *testing.T) {
	t.Parallel()
	s := dbtest.OpenPostgres(t)
	for pool, want := range map[string]string{"query": "on", "intake": "on", "locks": "on", "relaxed": "off"} {
		got, err := db.PoolSetting(pgCtx(t), s, pool, "synchronous_commit")
		require.NoError(t, err)
		require.Equal(t, want, got, pool)
	}
}

// limitedRole migrates the test schema as the test user, then returns its URL for a new role that
// may open at most limit connections (and the admin connection, for pg_stat_activity), with the
// query pool at 8: the warm pools' tests of a server short of connections.
func limitedRole(t *testing.T, limit int) (*url.URL, *pgx.Conn, string) {
	t.Helper()
	u, err := url.Parse(dbtest.PostgresSchemaURL(t))
	require.NoError(t, err)
	schema := u.Query().Get("search_path")
	// Migrate as the test user, so the limited role only runs queries.
	cold, err := db.Open(pgCtx(t), u.String(), db.WithMigrate())
	require.NoError(t, err)
	require.NoError(t, cold.Close())
	admin, err := pgx.Connect(pgCtx(t), u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(pgCtx(t)) })
	role := fmt.Sprintf("tbwarm%d", time.Now().UnixNano())
	_, err = admin.Exec(pgCtx(t), fmt.Sprintf("CREATE ROLE %[1]s LOGIN PASSWORD 'warm' CONNECTION LIMIT %[3]d; "+
		"GRANT ALL ON SCHEMA %[2]s TO %[1]s; GRANT ALL ON ALL TABLES IN SCHEMA %[2]s TO %[1]s; "+
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA %[2]s TO %[1]s", role, schema, limit))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(pgCtx(t), fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '%s'", role))
		_, _ = admin.Exec(pgCtx(t), fmt.Sprintf("REVOKE ALL ON ALL SEQUENCES IN SCHEMA %[2]s FROM %[1]s; "+
			"REVOKE ALL ON ALL TABLES IN SCHEMA %[2]s FROM %[1]s; REVOKE ALL ON SCHEMA %[2]s FROM %[1]s; DROP ROLE %[1]s", role, schema))
	})
	u.User = url.UserPassword(role, "warm")
	q := u.Query()
	q.Set("pool_max_conns", "8")
	u.RawQuery = q.Encode()
	return u, admin, role
}
