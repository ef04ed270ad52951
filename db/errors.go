package db

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Match them with errors.Is: the store wraps them with context.
var (
	// ErrNotFound means the row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrDuplicate means a turn with the same platform event id exists: the event was seen before.
	ErrDuplicate = errors.New("duplicate")
	// ErrConflict means a compare-and-set found the row in another state. The error is a
	// *TransitionError that says which.
	ErrConflict = errors.New("state conflict")
	// ErrNotOwner means a write fenced to a turn's owner found it held by another process (it
	// claimed the turn, taking this one for dead). It is also an ErrConflict.
	ErrNotOwner = errors.New("turn held by another process")
	// ErrLocked means another process holds the SQLite database.
	ErrLocked = errors.New("database locked")
	// ErrInvalid means the caller passed arguments the store refuses (an empty key, an unknown status).
	ErrInvalid = errors.New("invalid argument")
	// ErrSchemaNewer means a newer release migrated the database past what this binary knows (the
	// binary was rolled back), with a migration older binaries cannot run against (schema_compat):
	// the store refuses to migrate or to serve on it.
	ErrSchemaNewer = errors.New("database schema is newer than this binary")
	// ErrSchemaAhead means a newer release migrated the database past what this binary knows, with
	// migrations it marked compatible with older binaries (schema_compat): Migrate and CheckSchema
	// did their work, and the caller warns and goes on.
	ErrSchemaAhead = errors.New("database schema is ahead of this binary")
	// ErrBadURL means database.url is malformed or names an unknown scheme.
	ErrBadURL = errors.New("bad database url")
)

// TransitionError is returned when a compare-and-set on a status finds the row in a state it did not
// expect. Nothing was changed.
type TransitionError struct {
	// Entity is "session" or "turn"; Key is the thread key or the turn id.
	Entity string
	Key    string
	From   []string
	To     string
	// Actual is the status read right after the failed update. Another writer may have changed it
	// since, so use it for messages, not for decisions.
	Actual string
	// Generation and ActualGeneration are set when the transition was fenced to a generation
	// (Transition.IfGeneration): the one it expected, and the one read after the failed update.
	Generation, ActualGeneration int64
	// Owner and ActualOwner are set when the transition was fenced to a turn's owner
	// (TurnResult.Owner): the one it expected, and the one read after the failed update.
	Owner, ActualOwner string
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("%s %s: cannot move to %s from %s (want %s)",
		e.Entity, e.Key, e.To, e.Actual, strings.Join(e.From, "|"))
	if e.Generation != e.ActualGeneration {
		msg += fmt.Sprintf(" at generation %d (now %d)", e.Generation, e.ActualGeneration)
	}
	if e.notOwner() {
		msg += fmt.Sprintf(", held by %s (not %s)", e.ActualOwner, e.Owner)
	}
	return msg
}

// Is makes errors.Is(err, ErrConflict) true, and errors.Is(err, ErrNotOwner) when another process
// holds the turn.
func (e *TransitionError) Is(target error) bool {
	return target == ErrConflict || (target == ErrNotOwner && e.notOwner())
}

func (e *TransitionError) notOwner() bool { return e.Owner != "" && e.ActualOwner != e.Owner }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("db: %w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// noRow is the answer to a lookup by a key that cannot name a row (storableKey).
func noRow(what, key string) error {
	return fmt.Errorf("db: %s %q: %w", what, key, ErrNotFound)
}
