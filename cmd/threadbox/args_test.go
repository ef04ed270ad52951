package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCommandsRefuseStrayArguments: `threadbox migrate --config prod.yaml` (the global flag after the
// command) used to ignore the flag and migrate the default SQLite database, saying "migrations
// applied"; doctor checked the defaults and passed. Commands that take no arguments now refuse them,
// before touching anything, and say where --config goes.
func TestCommandsRefuseStrayArguments(t *testing.T) {
	for _, args := range [][]string{
		{"migrate", "--config", "prod.yaml"},
		{"doctor", "--config", "prod.yaml"},
		{"version", "extra"},
		{"serve", "extra"},
	} {
		t.Run(args[0], func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "tb.db")
			stdout, stderr, err := runMain(t, []string{"THREADBOX_DATABASE_URL=sqlite:" + db}, args...)
			require.ErrorIs(t, err, errUsage)
			require.Empty(t, stdout)
			require.Contains(t, stderr, "threadbox "+args[0]+": unexpected argument")
			require.Contains(t, stderr, "threadbox --config FILE "+args[0])
			_, statErr := os.Stat(db)
			require.ErrorIs(t, statErr, os.ErrNotExist, "nothing was opened")
		})
	}
}
