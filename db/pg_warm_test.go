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

// TestPostgresWarmPools: with WithWarmPools, Open returns with every pool full (fixed-size pools);
// without it, the intake has none and the lock pool at most the one migrating used.
func TestPostgresWarmPools(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		opts                 []db.Option
		query, intake, locks int
	}{
		{"warm", []db.Option{db.WithWarmPools(), db.WithLockConns(16)}, 8, 2, 16},
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
				return
			}
			require.Equal(t, tc.intake, count(app+"-intake"), "intake")
			require.LessOrEqual(t, count(app+"-locks"), tc.locks, "lock pool: the one migrating used at most")
			require.Zero(t, count(app+"-relaxed"), "relaxed pool")
		})
	}
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
