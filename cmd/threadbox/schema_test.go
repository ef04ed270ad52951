package main

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// TestStartSchemaRefusesNewerSchema: serve (and admin) refuse a database that a newer release
// migrated, whether auto_migrate is on or off; before, an operator who rolled the binary back ran
// it silently on the newer schema.
func TestStartSchemaRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	for _, autoMigrate := range []bool{true, false} {
		t.Run(map[bool]string{true: "auto_migrate", false: "no auto_migrate"}[autoMigrate], func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "threadbox.db")
			st, err := db.Open(ctx, "sqlite:"+path, db.WithMigrate())
			require.NoError(t, err)
			require.NoError(t, startSchema(ctx, st, autoMigrate), "this binary's own schema")
			require.NoError(t, st.Close())

			// What a newer release's migrator leaves behind.
			raw, err := sql.Open("sqlite", path)
			require.NoError(t, err)
			_, err = raw.ExecContext(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, 1)")
			require.NoError(t, err)
			require.NoError(t, raw.Close())

			st, err = db.Open(ctx, "sqlite:"+path)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			err = startSchema(ctx, st, autoMigrate)
			require.ErrorIs(t, err, db.ErrSchemaNewer)
			require.NotContains(t, err.Error(), "auto_migrate: false to skip", "skipping would not help")
		})
	}
}
