package db

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// DefaultURL is the database the app uses when database.url is not set.
const DefaultURL = "sqlite:./data/threadbox.db"

// Open connects to the database that url names:
//   - sqlite:<path> (also sqlite://<path>): an embedded database file. The parent directory is
//     created, and a lock file <path>.lock keeps a second process (or a second Open) out.
//   - postgres://… or postgresql://…: a pgx pool; pool_max_conns and the other pgxpool settings
//     may be given as URL parameters.
//
// Open does not migrate unless WithMigrate is given. Its errors name the setting (database.url) and
// say what is wrong: ErrBadURL for an unknown scheme or an unparsable URL, ErrLocked for a SQLite
// database in use, otherwise the connection error. They never contain the password.
func Open(ctx context.Context, url string, opts ...Option) (Store, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	var (
		s   Store
		err error
	)
	switch scheme := urlScheme(url); scheme {
	case "":
		return nil, fmt.Errorf("database.url: %w: empty, or no scheme; want sqlite:<path> or postgres://…", ErrBadURL)
	case "sqlite":
		s, err = openSQLite(ctx, strings.TrimPrefix(url, "sqlite:"), o)
	case "postgres", "postgresql":
		s, err = openPostgres(ctx, url, o)
	default:
		return nil, fmt.Errorf("database.url: %w: unknown scheme %q; want sqlite:<path> or postgres://…", ErrBadURL, scheme)
	}
	if err != nil {
		return nil, err
	}
	if o.migrate {
		// A schema ahead of this binary but compatible with it (a rollback) is used as it is.
		if err := s.Migrate(ctx); err != nil && !errors.Is(err, ErrSchemaAhead) {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// urlScheme returns the lower-cased part before the first colon, or "" if it does not look like a
// scheme (so that a bare path is reported as missing its scheme, not as an odd one).
func urlScheme(url string) string {
	i := strings.IndexByte(url, ':')
	if i <= 0 {
		return ""
	}
	scheme := strings.ToLower(url[:i])
	for _, r := range scheme {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '+' && r != '-' && r != '.' {
			return ""
		}
	}
	return scheme
}
