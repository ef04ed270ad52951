package main

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/threadbox/threadbox/db"
)

// TestStartSchemaNewerSchema: serve (and admin) run on a database that a newer release migrated
// compatibly (a rollback must start), and refuse one whose schema that release marked too new for
// this binary, whether auto_migrate is on or off.
func TestStartSchemaNewerSchema(t *testing.T) {
	t.Parallel()
	for _, autoMigrate := range []bool{true, false} {
		t.Run(map[bool]string{true: "auto_migrate", false: "no auto_migrate"}[autoMigrate], func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "threadbox.db")
			st, err := db.Open(ctx, "sqlite:"+path, db.WithMigrate())
			require.NoError(t, err)
			require.NoError(t, startSchema(ctx, st, autoMigrate, zap.NewNop()), "this binary's own schema")
			require.NoError(t, st.Close())

			exec := func(q string) {
				raw, err := sql.Open("sqlite", path)
				require.NoError(t, err)
				_, err = raw.ExecContext(ctx, q)
				require.NoError(t, err)
				require.NoError(t, raw.Close())
			}
			reopen := func() db.Store {
				st, err := db.Open(ctx, "sqlite:"+path)
				require.NoError(t, err)
				return st
			}
			// What a newer release's additive migration leaves behind: runs, with a warning.
			exec("INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, 1)")
			core, logs := observer.New(zap.WarnLevel)
			st = reopen()
			require.NoError(t, startSchema(ctx, st, autoMigrate, zap.New(core)))
			require.NoError(t, st.Close())
			require.Equal(t, 1, logs.FilterMessageSnippet("ahead of this binary").Len())

			// A newer release's migration older binaries cannot run against: refused.
			exec("UPDATE schema_compat SET min_binary_version = 99")
			st = reopen()
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			err = startSchema(ctx, st, autoMigrate, zap.NewNop())
			require.ErrorIs(t, err, db.ErrSchemaNewer)
			require.NotContains(t, err.Error(), "auto_migrate: false to skip", "skipping would not help")
		})
	}
}
