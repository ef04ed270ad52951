package db_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// childEnv makes the test binary act as a second threadbox process that opens a SQLite database
// (see TestMain) instead of running tests.
const childEnv = "THREADBOX_TEST_SQLITE_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		_, err := db.Open(context.Background(), "sqlite:"+path)
		fmt.Println(err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSQLiteSecondOpenRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "nested", "dir", "threadbox.db") // parents are created
	s, err := db.Open(ctx, "sqlite:"+path, db.WithMigrate())
	require.NoError(t, err)

	_, err = db.Open(ctx, "sqlite:"+path)
	require.ErrorIs(t, err, db.ErrLocked)
	require.ErrorContains(t, err, "database.url")
	require.ErrorContains(t, err, "another threadbox process uses "+path)

	require.NoError(t, s.Close())
	again, err := db.Open(ctx, "sqlite:"+path)
	require.NoError(t, err, "the lock goes with Close")
	require.NoError(t, again.Close())
}

// TestSQLiteSecondProcessRefused runs a real second process against a held database.
func TestSQLiteSecondProcessRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "threadbox.db")
	s, err := db.Open(t.Context(), "sqlite:"+path)
	require.NoError(t, err)
	defer s.Close()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "database.url: database locked: another threadbox process uses "+path)
}

func TestSQLiteConnectionSettings(t *testing.T) {
	t.Parallel()
	s := dbtest.OpenSQLite(t)
	ctx := t.Context()
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"foreign_keys": "1",
		"busy_timeout": "10000",
		"synchronous":  "1", // NORMAL
	} {
		got, err := db.SQLitePragma(ctx, s, pragma)
		require.NoError(t, err)
		require.Equal(t, want, got, pragma)
	}
}

// TestSQLiteThreadMutexesDoNotLeak: per-key mutexes exist only while held or awaited.
func TestSQLiteThreadMutexesDoNotLeak(t *testing.T) {
	t.Parallel()
	s := dbtest.OpenSQLite(t)
	ctx := t.Context()
	for i := range 100 {
		unlock, err := s.LockThread(ctx, fmt.Sprintf("thread-%d", i))
		require.NoError(t, err)
		unlock()
	}
	unlock, err := s.LockThread(ctx, "held")
	require.NoError(t, err)
	require.Equal(t, 1, db.LiveThreadMutexes(s))
	unlock()
	require.Zero(t, db.LiveThreadMutexes(s))
}

// TestSQLiteMigrateConcurrent: callers migrating one fresh store at once all succeed (Postgres has its
// advisory lock for this); before, goose ran for each and all but one failed on "table already exists".
func TestSQLiteMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := db.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "threadbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	v, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Positive(t, v)
}
