package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
	"github.com/threadbox/threadbox/db/internal/sqlitesqlc"
)

// Command is a chat command (help, status, stop, reset, use, admin …) from before its ack until its
// reply is posted (table command_replies). Acknowledged means answered, for commands as for turns:
// a process that dies in between leaves the row, and a live one answers it. Times are UTC.
type Command struct {
	ID              int64
	PlatformEventID string
	ThreadKey       string
	UserID          string
	// Command names the command for the user ("reset", "admin destroy"), never its arguments' secrets.
	Command string
	// Private: the answer goes to UserID alone (admin replies), never into the thread.
	Private bool
	// Delivery is where the reply goes, opaque to the store (as a turn's).
	Delivery json.RawMessage
	Owner    string
	// Answer is the command's reply, once it has answered; nil before.
	Answer *string
	// Attempts counts the posts of the reply that failed.
	Attempts  int
	CreatedAt time.Time
}

// NewCommand is a command to record.
type NewCommand struct {
	PlatformEventID string
	ThreadKey       string
	UserID          string
	Command         string
	Private         bool
	Delivery        json.RawMessage
	Owner           string
}

// Command bounds: a name is a word or two; an answer is what a reply may carry.
const (
	maxCommandName   = 64
	MaxCommandAnswer = 1 << 20
)

// CommandStore keeps the commands in flight, so a crash between a command's ack and its reply does
// not leave its sender without an answer.
type CommandStore interface {
	// CommandInsert records a command; ErrDuplicate when its event is recorded already.
	CommandInsert(ctx context.Context, c NewCommand) (Command, error)
	// CommandAnswer records the command's answer (the first one recorded stands).
	CommandAnswer(ctx context.Context, id int64, answer string) error
	// CommandPostFailed counts a failed post of the command's reply and returns the count so far.
	CommandPostFailed(ctx context.Context, id int64) (int, error)
	// CommandDelete forgets a command whose reply is posted (or given up); deleting it twice is no
	// error.
	CommandDelete(ctx context.Context, id int64) error
	// CommandsOpen pages through the recorded commands in id order, starting after afterID.
	CommandsOpen(ctx context.Context, afterID int64, limit int) ([]Command, error)
	// CommandClaim makes to the owner of a command if from still owns it; ErrConflict otherwise.
	CommandClaim(ctx context.Context, id int64, from, to string) (Command, error)
}

func (c NewCommand) check() error {
	if err := checkThreadKey(c.ThreadKey); err != nil {
		return err
	}
	if c.PlatformEventID == "" {
		return invalidf("command for %s has no platform event id", c.ThreadKey)
	}
	if err := checkKeyText("platform event id", c.PlatformEventID); err != nil {
		return err
	}
	if strings.TrimSpace(c.Command) == "" || len(c.Command) > maxCommandName {
		return invalidf("command name must be 1 to %d bytes", maxCommandName)
	}
	if !json.Valid(c.Delivery) {
		return invalidf("command delivery is not valid JSON")
	}
	return nil
}

func checkAnswer(answer string) error {
	if len(answer) > MaxCommandAnswer {
		return invalidf("command answer of %d bytes; the limit is %d", len(answer), MaxCommandAnswer)
	}
	if strings.ContainsRune(answer, 0) {
		return invalidf("command answer contains NUL")
	}
	return nil
}

// Postgres.

func fromPGCommand(r pgsqlc.CommandReply) Command {
	c := Command{
		ID: r.ID, PlatformEventID: r.PlatformEventID, ThreadKey: r.ThreadKey, UserID: r.UserID,
		Command: r.Command, Private: r.Private, Delivery: rawJSON(r.Delivery), Owner: r.Owner,
		Attempts: int(r.Attempts), CreatedAt: fromPGTime(r.CreatedAt),
	}
	if r.Answer.Valid {
		c.Answer = &r.Answer.String
	}
	return c
}

func (s *pgStore) CommandInsert(ctx context.Context, c NewCommand) (Command, error) {
	if err := c.check(); err != nil {
		return Command{}, err
	}
	r, err := s.q.CommandInsert(ctx, s.dbtx, pgsqlc.CommandInsertParams{
		PlatformEventID: c.PlatformEventID, ThreadKey: c.ThreadKey, UserID: c.UserID, Command: c.Command,
		Private: c.Private, Delivery: c.Delivery, Owner: c.Owner, Now: pgTime(s.now()),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Command{}, commandDuplicate(c)
	}
	if err != nil {
		return Command{}, pgErr("record command for event "+c.PlatformEventID, err)
	}
	return fromPGCommand(r), nil
}

func (s *pgStore) CommandAnswer(ctx context.Context, id int64, answer string) error {
	if err := checkAnswer(answer); err != nil {
		return err
	}
	_, err := s.q.CommandAnswer(ctx, s.dbtx, pgsqlc.CommandAnswerParams{ID: id, Answer: pgtype.Text{String: answer, Valid: true}})
	if err != nil {
		return pgErr("record command answer", err)
	}
	return nil
}

func (s *pgStore) CommandPostFailed(ctx context.Context, id int64) (int, error) {
	n, err := s.q.CommandPostFailed(ctx, s.dbtx, id)
	if err != nil {
		return 0, pgErr("count a failed command reply", err)
	}
	return int(n), nil
}

func (s *pgStore) CommandDelete(ctx context.Context, id int64) error {
	if err := s.q.CommandDelete(ctx, s.dbtx, id); err != nil {
		return pgErr("forget command", err)
	}
	return nil
}

func (s *pgStore) CommandsOpen(ctx context.Context, afterID int64, limit int) ([]Command, error) {
	rows, err := s.q.CommandsOpen(ctx, s.dbtx, pgsqlc.CommandsOpenParams{AfterID: afterID, Lim: int32(batchLimit(limit))})
	if err != nil {
		return nil, pgErr("list open commands", err)
	}
	out := make([]Command, len(rows))
	for i, r := range rows {
		out[i] = fromPGCommand(r)
	}
	return out, nil
}

func (s *pgStore) CommandClaim(ctx context.Context, id int64, from, to string) (Command, error) {
	r, err := s.q.CommandClaim(ctx, s.dbtx, pgsqlc.CommandClaimParams{ID: id, FromOwner: from, ToOwner: to})
	if errors.Is(err, pgx.ErrNoRows) {
		return Command{}, commandClaimConflict(id)
	}
	if err != nil {
		return Command{}, pgErr("claim command", err)
	}
	return fromPGCommand(r), nil
}

// SQLite.

func fromSQLiteCommand(r sqlitesqlc.CommandReply) (Command, error) {
	var p sqliteTimes
	c := Command{
		ID: r.ID, PlatformEventID: r.PlatformEventID, ThreadKey: r.ThreadKey, UserID: r.UserID,
		Command: r.Command, Private: r.Private, Delivery: json.RawMessage(r.Delivery), Owner: r.Owner,
		Attempts: int(r.Attempts), CreatedAt: p.parse("created_at", r.CreatedAt),
	}
	if r.Answer.Valid {
		c.Answer = &r.Answer.String
	}
	return c, p.err
}

func (s *sqliteStore) CommandInsert(ctx context.Context, c NewCommand) (Command, error) {
	if err := c.check(); err != nil {
		return Command{}, err
	}
	r, err := s.q.CommandInsert(ctx, s.dbtx, sqlitesqlc.CommandInsertParams{
		PlatformEventID: c.PlatformEventID, ThreadKey: c.ThreadKey, UserID: c.UserID, Command: c.Command,
		Private: c.Private, Delivery: string(c.Delivery), Owner: c.Owner, Now: s.clock(),
	})
	if err != nil {
		if err = sqliteErr("record command for event "+c.PlatformEventID, err); errors.Is(err, ErrNotFound) {
			return Command{}, commandDuplicate(c) // ON CONFLICT DO NOTHING returned no row
		}
		return Command{}, err
	}
	return fromSQLiteCommand(r)
}

func (s *sqliteStore) CommandAnswer(ctx context.Context, id int64, answer string) error {
	if err := checkAnswer(answer); err != nil {
		return err
	}
	_, err := s.q.CommandAnswer(ctx, s.dbtx, sqlitesqlc.CommandAnswerParams{ID: id, Answer: sql.NullString{String: answer, Valid: true}})
	if err != nil {
		return sqliteErr("record command answer", err)
	}
	return nil
}

func (s *sqliteStore) CommandPostFailed(ctx context.Context, id int64) (int, error) {
	n, err := s.q.CommandPostFailed(ctx, s.dbtx, id)
	if err != nil {
		return 0, sqliteErr("count a failed command reply", err)
	}
	return int(n), nil
}

func (s *sqliteStore) CommandDelete(ctx context.Context, id int64) error {
	if err := s.q.CommandDelete(ctx, s.dbtx, id); err != nil {
		return sqliteErr("forget command", err)
	}
	return nil
}

func (s *sqliteStore) CommandsOpen(ctx context.Context, afterID int64, limit int) ([]Command, error) {
	rows, err := s.q.CommandsOpen(ctx, s.dbtx, sqlitesqlc.CommandsOpenParams{AfterID: afterID, Lim: int64(batchLimit(limit))})
	if err != nil {
		return nil, sqliteErr("list open commands", err)
	}
	out := make([]Command, 0, len(rows))
	for _, r := range rows {
		c, err := fromSQLiteCommand(r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (s *sqliteStore) CommandClaim(ctx context.Context, id int64, from, to string) (Command, error) {
	r, err := s.q.CommandClaim(ctx, s.dbtx, sqlitesqlc.CommandClaimParams{ID: id, FromOwner: from, ToOwner: to})
	if err != nil {
		if err = sqliteErr("claim command", err); errors.Is(err, ErrNotFound) {
			return Command{}, commandClaimConflict(id)
		}
		return Command{}, err
	}
	return fromSQLiteCommand(r)
}

func commandDuplicate(c NewCommand) error {
	return fmt.Errorf("db: record command for event %s: %w", c.PlatformEventID, ErrDuplicate)
}

func commandClaimConflict(id int64) error {
	return fmt.Errorf("db: claim command %d: %w", id, ErrConflict)
}
