package db_test

import (
	"testing"

	"github.com/threadbox/threadbox/db/dbtest"
)

// Both engines pass the same conformance suite.

func TestSQLiteStore(t *testing.T) {
	t.Parallel()
	dbtest.Run(t, dbtest.OpenSQLite)
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	dbtest.PostgresURL(t) // skip (or fail) once, up front, if the server is missing
	dbtest.Run(t, dbtest.OpenPostgres)
}
