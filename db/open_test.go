package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// TestOpenBadURL: every way database.url can be wrong names the setting, says what is wrong, and
// never echoes the password.
func TestOpenBadURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		badURL  bool   // errors.Is(err, db.ErrBadURL)
		mention string // the error says this
	}{
		{"empty", "", true, "want sqlite:<path> or postgres://"},
		{"no scheme", "./data/threadbox.db", true, "no scheme"},
		{"unknown scheme", "mysql://u:s3cret@localhost/db", true, `unknown scheme "mysql"`},
		{"sqlite without path", "sqlite:", true, "needs a file path"},
		{"sqlite memory", "sqlite::memory:", true, "not a plain file path"},
		{"postgres bad port", "postgres://u:s3cret@localhost:notaport/db", true, "cannot parse"},
		{"postgres bad param", "postgres://u:s3cret@localhost/db?sslmode=maybe", true, "sslmode"},
		{"postgres nobody listening", "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=5", false, "cannot connect to postgres at 127.0.0.1:1/db"},
		{"postgresql scheme nobody listening", "postgresql://u:s3cret@127.0.0.1:1/db?connect_timeout=5", false, "cannot connect"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := db.Open(ctx, tc.url)
			require.Error(t, err)
			require.Nil(t, s)
			require.ErrorContains(t, err, "database.url")
			require.ErrorContains(t, err, tc.mention)
			require.NotContains(t, err.Error(), "s3cret")
			if tc.badURL {
				require.ErrorIs(t, err, db.ErrBadURL)
			} else {
				require.NotErrorIs(t, err, db.ErrBadURL)
			}
		})
	}
}

func TestOpenSQLiteURLForms(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, url := range []string{"sqlite:" + dir + "/a.db", "sqlite://" + dir + "/b.db"} {
		s, err := db.Open(t.Context(), url, db.WithMigrate())
		require.NoError(t, err, url)
		require.NoError(t, s.Ping(t.Context()))
		v, err := s.SchemaVersion(t.Context())
		require.NoError(t, err)
		require.Positive(t, v)
		require.NoError(t, s.Close())
	}
	require.FileExists(t, dir+"/a.db")
	require.FileExists(t, dir+"/b.db")
}

// TestOpenDoesNotMigrate: without WithMigrate the schema is left alone.
func TestOpenDoesNotMigrate(t *testing.T) {
	t.Parallel()
	s, err := db.Open(t.Context(), "sqlite:"+t.TempDir()+"/x.db")
	require.NoError(t, err)
	defer s.Close()
	v, err := s.SchemaVersion(t.Context())
	require.NoError(t, err)
	require.Zero(t, v)
	_, err = s.SessionGet(t.Context(), "k")
	require.Error(t, err)
	require.NotErrorIs(t, err, db.ErrNotFound, "no table, not no row")
}
