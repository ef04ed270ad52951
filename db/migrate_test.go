package db_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// TestSchemaNewerThanBinary: a database that a newer release migrated (a version this binary does
// not carry, above its newest or in a gap between its own) is run on, with ErrSchemaAhead for the
// caller to warn about, while that release marked its schema compatible (schema_compat: a rollback
// must start); once a migration raised the compatibility level past this binary, Migrate and
// CheckSchema refuse it (ErrSchemaNewer) on both engines, with a message naming both versions and
// what to do. Before, goose found nothing to apply and the rolled-back binary served in silence.
func TestSchemaNewerThanBinary(t *testing.T) {
	t.Parallel()
	engines := map[string]func(testing.TB) string{
		"sqlite":   func(tb testing.TB) string { return "sqlite:" + tb.TempDir() + "/threadbox.db" },
		"postgres": dbtest.PostgresSchemaURL,
	}
	for name, url := range engines {
		for _, tc := range []struct {
			name    string
			version int64
			want    string
		}{
			{"above the newest", 99, "schema version 99, with migrations [99]"},
			{"in a gap", 7, "with migrations [7]"},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := dbtest.OpenURL(t, url(t))
				ctx := t.Context()
				binary, err := s.SchemaVersion(ctx)
				require.NoError(t, err)
				require.NoError(t, s.CheckSchema(ctx), "a database this binary migrated is fine")

				// What a newer release's additive migration leaves behind.
				require.NoError(t, db.ExecSQL(ctx, s, fmt.Sprintf(
					"INSERT INTO goose_db_version (version_id, is_applied) VALUES (%d, true)", tc.version)))
				for what, err := range map[string]error{"Migrate": s.Migrate(ctx), "CheckSchema": s.CheckSchema(ctx)} {
					require.ErrorIs(t, err, db.ErrSchemaAhead, what)
					require.NotErrorIs(t, err, db.ErrSchemaNewer, what)
					require.ErrorContains(t, err, tc.want, what)
				}

				// A newer release's migration that older binaries cannot run against.
				require.NoError(t, db.ExecSQL(ctx, s, fmt.Sprintf(
					"UPDATE schema_compat SET min_binary_version = %d", binary+1)))
				for what, err := range map[string]error{"Migrate": s.Migrate(ctx), "CheckSchema": s.CheckSchema(ctx)} {
					require.ErrorIs(t, err, db.ErrSchemaNewer, what)
					require.ErrorContains(t, err, tc.want, what)
					require.ErrorContains(t, err, fmt.Sprintf("this binary (schema version %d)", binary), what)
					require.ErrorContains(t, err, fmt.Sprintf("schema version %d or later", binary+1), what)
					require.ErrorContains(t, err, "Run that newer release", what)
				}
			})
		}
	}
}
