package db

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

// The migrations are embedded so the binary carries its schema. Each engine has its own directory
// because the dialects differ; sqlc reads the same files as its schema.
//
//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationFiles embed.FS

// newMigrator builds a goose provider over one engine's migrations. It uses goose's Provider API
// with the global registry off, so nothing here touches goose's package-level state.
func newMigrator(dialect goose.Dialect, dir string, sqlDB *sql.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(migrationFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("db: migrations: %w", err)
	}
	// Out-of-order migrations are applied rather than refused: features land on parallel branches,
	// each migration is additive and independent of its neighbours, and a database that ran a build
	// with a later one first must still take the earlier one (goose records each version applied).
	p, err := goose.NewProvider(dialect, sqlDB, sub, goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true))
	if err != nil {
		return nil, fmt.Errorf("db: migrations: %w", err)
	}
	return p, nil
}

// migrateUp refuses a database migrated by a newer binary that this one cannot run against
// (checkSchema) before it applies anything. One that is ahead but compatible is migrated as far as
// this binary knows, and its ErrSchemaAhead returned for the caller to warn about.
func migrateUp(ctx context.Context, p *goose.Provider, dialect goose.Dialect, sqlDB *sql.DB) error {
	ahead := checkSchema(ctx, p, dialect, sqlDB)
	if ahead != nil && !errors.Is(ahead, ErrSchemaAhead) {
		return ahead
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	return ahead
}

// schemaVersion is the newest applied migration's version. On a fresh database goose creates its
// bookkeeping table to answer, which changes no schema of ours.
func schemaVersion(ctx context.Context, p *goose.Provider) (int64, error) {
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("db: schema version: %w", err)
	}
	return v, nil
}

// checkSchema returns ErrSchemaNewer if the database has a migration applied that this binary does
// not carry: a newer release migrated it and the operator rolled the binary back. goose would just
// find nothing to apply, and this binary would then run queries written for an older schema against
// the newer one (a column it does not fill, a constraint it does not know), silently writing rows the
// newer release misreads. Versions are compared as a set, not by their maximum, because migrations
// may be applied out of order (newMigrator).
func checkSchema(ctx context.Context, p *goose.Provider, dialect goose.Dialect, sqlDB *sql.DB) error {
	// Creates goose's bookkeeping table on a fresh database, so the listing below has one to read.
	if _, err := p.GetDBVersion(ctx); err != nil {
		return fmt.Errorf("db: schema version: %w", err)
	}
	store, err := database.NewStore(dialect, goose.DefaultTablename)
	if err != nil {
		return fmt.Errorf("db: schema version: %w", err)
	}
	applied, err := store.ListMigrations(ctx, sqlDB)
	if err != nil {
		return fmt.Errorf("db: schema version: %w", err)
	}
	known := make(map[int64]bool)
	var binary int64
	for _, src := range p.ListSources() {
		known[src.Version] = true
		binary = max(binary, src.Version)
	}
	var unknown []int64
	var dbVersion int64
	for _, m := range applied {
		// Version 0 is goose's own first row.
		if !m.IsApplied || m.Version == 0 {
			continue
		}
		dbVersion = max(dbVersion, m.Version)
		if !known[m.Version] && !slices.Contains(unknown, m.Version) {
			unknown = append(unknown, m.Version)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	// Migrations are additive, so an older binary runs on a newer schema unless a migration said
	// otherwise (schema_compat): a rolled-back release must start, or the rollback is no way back.
	var minBinary int64
	row := sqlDB.QueryRowContext(ctx, "SELECT min_binary_version FROM schema_compat WHERE id = 1")
	if err := row.Scan(&minBinary); err != nil {
		// A newer release without the table is not one this binary knows how to judge.
		minBinary = math.MaxInt64
	}
	if minBinary <= binary {
		return fmt.Errorf("db: %w: the database is at schema version %d, with migrations %v that this binary "+
			"(schema version %d) does not have: a newer Threadbox migrated it. They are marked compatible with "+
			"this binary, so it runs; upgrade to that release again when you can", ErrSchemaAhead, dbVersion, unknown, binary)
	}
	return fmt.Errorf("db: %w: the database is at schema version %d, with migrations %v that this binary "+
		"(schema version %d) does not have: a newer Threadbox migrated it, and its schema needs a binary of "+
		"schema version %d or later. Run that newer release (or a later one) against this database, or restore "+
		"the backup taken before it migrated; this binary refuses to run so as not to write rows the newer "+
		"schema does not expect", ErrSchemaNewer, dbVersion, unknown, binary, minBinary)
}
