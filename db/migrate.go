package db

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
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

func migrateUp(ctx context.Context, p *goose.Provider) error {
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("db: migrate: %w", err)
	}
	return nil
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
