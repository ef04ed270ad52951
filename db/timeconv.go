package db

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Both engines keep microseconds, so the store truncates every time it writes to that: a value read
// back then equals the value written, on either engine.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// sqliteLayout is fixed-width (always six fraction digits, always Z) so that SQLite's string
// comparison and max() order times correctly and the range indexes work.
const sqliteLayout = "2006-01-02T15:04:05.000000Z"

func sqliteTime(t time.Time) string { return dbTime(t).Format(sqliteLayout) }

func sqliteNullTime(t time.Time) sql.NullString {
	if t.IsZero() {
		return sql.NullString{}
	}
	return sql.NullString{String: sqliteTime(t), Valid: true}
}

// sqliteBound is a time that a query compares against (a cutoff, a since): never NULL, since a
// comparison with NULL is never true, so a zero time is the earliest time, as on PostgreSQL.
func sqliteBound(t time.Time) sql.NullString {
	return sql.NullString{String: sqliteTime(t), Valid: true}
}

// sqliteTimes parses stored times, keeping the first error, so converters read straight through a
// row and check once.
type sqliteTimes struct{ err error }

func (p *sqliteTimes) parse(col, s string) time.Time {
	t, err := time.Parse(sqliteLayout, s)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("db: sqlite column %s holds %q, not a store time: %w", col, s, err)
	}
	return t.UTC()
}

func (p *sqliteTimes) null(col string, s sql.NullString) time.Time {
	if !s.Valid {
		return time.Time{}
	}
	return p.parse(col, s.String)
}

func pgTime(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: dbTime(t), Valid: true}
}

func fromPGTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}
