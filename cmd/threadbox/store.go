package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/db"
)

// openStore opens the configured database and registers it for Close. extra adds options (serve
// warms the pools).
func (m *Main) openStore(ctx context.Context, extra ...db.Option) (db.Store, error) {
	st, err := db.Open(ctx, m.Config.Database.URL, append([]db.Option{db.WithLockConns(lockConns(m.Config.Config))}, extra...)...)
	if err != nil {
		return nil, err
	}
	m.onClose(st.Close)
	return st, nil
}

func (m *Main) runMigrate(ctx context.Context) error {
	st, err := m.openStore(ctx)
	if err != nil {
		return err
	}
	err = st.Migrate(ctx)
	if errors.Is(err, db.ErrSchemaAhead) {
		fmt.Fprintln(m.Stdout, "migrations applied; warning:", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintln(m.Stdout, "migrations applied")
	return nil
}

func (m *Main) checkDatabase(ctx context.Context) (string, *problem) {
	url := m.Config.Database.URL
	st, err := db.Open(ctx, url)
	if errors.Is(err, db.ErrLocked) {
		return "in use by a running threadbox process (SQLite allows one)", nil
	}
	if err != nil {
		return "", &problem{what: oneLine(err), fix: "fix database.url (sqlite:<path> or postgres://user:pass@host:5432/db) or start the database"}
	}
	defer st.Close()
	if err := st.Ping(ctx); err != nil {
		return "", &problem{what: "database does not answer: " + oneLine(err), fix: "start the database server or fix database.url"}
	}
	if err := m.Config.ValidateServe(); err != nil {
		return "", &problem{what: "PostgreSQL is reachable, but serve will not start: runtime.secret is empty",
			fix: "set runtime.secret (THREADBOX_RUNTIME_SECRET) to one value shared by every replica, e.g. `openssl rand -hex 32`"}
	}
	return "reachable (" + config.RedactURL(url) + ")", nil
}

// lockConns sizes a replica's pool of PostgreSQL lock connections: one per running turn (at most
// sandbox.max_active run at once), plus room for the leader, the instance lock, the loops and admin
// actions, which also lock threads. With no cap on sandboxes it keeps the store's default.
func lockConns(c config.Config) int {
	switch {
	case c.Database.LockConns > 0:
		return c.Database.LockConns
	case c.Sandbox.MaxActive > 0:
		return c.Sandbox.MaxActive + 16
	}
	return 0
}
