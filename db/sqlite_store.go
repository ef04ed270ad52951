package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // the pure-Go "sqlite" database/sql driver

	"github.com/threadbox/threadbox/db/internal/sqlitesqlc"
)

// sqliteStore is the embedded Store: sqlc queries over modernc.org/sqlite (pure Go, no cgo). One
// process owns the database, enforced by a lock file, so thread locks are in-process mutexes and
// this process is always the leader.
type sqliteStore struct {
	sqlDB *sql.DB
	// dbtx is what the queries run on: sqlDB, or a recorder around it in tests.
	dbtx sqlitesqlc.DBTX
	q    *sqlitesqlc.Queries
	now  func() time.Time
	path string
	lock *fileLock

	threads *keyedMutex
	// migrating serializes Migrate: goose checks what is applied, then applies the rest, so two
	// callers at once both applied the first migration and one failed (table already exists).
	migrating sync.Mutex

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // protects the following
	leaders map[*localLeader]struct{}
	// instances counts the holds of each live process instance (HoldInstance).
	instances map[string]int
	// holds are the thread and instance holds not released yet: Close ends them.
	holds  map[*localHold]struct{}
	closed bool
}

var _ Store = (*sqliteStore)(nil)

// sqliteParams are the connection settings every pooled connection gets:
//   - WAL lets readers run while one writer writes;
//   - busy_timeout makes a writer wait for the lock instead of failing with SQLITE_BUSY;
//   - foreign_keys is off by default in SQLite;
//   - synchronous=NORMAL is the usual WAL pairing (durable at checkpoints, never corrupt);
//   - _txlock=immediate takes the write lock at BEGIN, so a transaction never fails half-way when it
//     upgrades from reading to writing (that failure does not honour busy_timeout).
const sqliteParams = "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)" +
	"&_pragma=synchronous(NORMAL)&_txlock=immediate"

func openSQLite(ctx context.Context, path string, o options) (*sqliteStore, error) {
	// Accept sqlite://path as well as sqlite:path.
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, fmt.Errorf("database.url: %w: sqlite: needs a file path, as in %s", ErrBadURL, DefaultURL)
	}
	if strings.ContainsAny(path, "?#") || strings.HasPrefix(path, ":memory:") {
		return nil, fmt.Errorf("database.url: %w: sqlite: %q is not a plain file path", ErrBadURL, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("database.url: sqlite: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
		return nil, fmt.Errorf("database.url: sqlite: create directory for %s: %w", abs, err)
	}
	lock, err := lockFile(abs + ".lock")
	if err != nil {
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("database.url: %w: another threadbox process uses %s (lock file %s.lock)",
				ErrLocked, abs, abs)
		}
		return nil, fmt.Errorf("database.url: sqlite: lock %s.lock: %w", abs, err)
	}
	sqlDB, err := sql.Open("sqlite", abs+"?"+sqliteParams)
	if err == nil {
		// A few connections are plenty: SQLite runs one writer at a time anyway.
		sqlDB.SetMaxOpenConns(8)
		err = sqlDB.PingContext(ctx)
	}
	if err != nil {
		if sqlDB != nil {
			_ = sqlDB.Close()
		}
		lock.unlock()
		return nil, fmt.Errorf("database.url: cannot open sqlite database %s: %w", abs, err)
	}
	return &sqliteStore{
		sqlDB:   sqlDB,
		dbtx:    sqlDB,
		q:       sqlitesqlc.New(),
		now:     o.now,
		path:    abs,
		lock:    lock,
		threads: newKeyedMutex(),
		leaders: make(map[*localLeader]struct{}),
	}, nil
}

func (s *sqliteStore) clock() string { return sqliteTime(s.now()) }

func (s *sqliteStore) Ping(ctx context.Context) error {
	if err := s.sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("db: ping: %w", err)
	}
	return nil
}

func (s *sqliteStore) Migrate(ctx context.Context) error {
	s.migrating.Lock()
	defer s.migrating.Unlock()
	p, err := newMigrator(goose.DialectSQLite3, "migrations/sqlite", s.sqlDB)
	if err != nil {
		return err
	}
	return migrateUp(ctx, p, goose.DialectSQLite3, s.sqlDB)
}

func (s *sqliteStore) CheckSchema(ctx context.Context) error {
	p, err := newMigrator(goose.DialectSQLite3, "migrations/sqlite", s.sqlDB)
	if err != nil {
		return err
	}
	return checkSchema(ctx, p, goose.DialectSQLite3, s.sqlDB)
}

func (s *sqliteStore) SchemaVersion(ctx context.Context) (int64, error) {
	p, err := newMigrator(goose.DialectSQLite3, "migrations/sqlite", s.sqlDB)
	if err != nil {
		return 0, err
	}
	return schemaVersion(ctx, p)
}

func (s *sqliteStore) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		leaders := make([]*localLeader, 0, len(s.leaders))
		for l := range s.leaders {
			leaders = append(leaders, l)
		}
		holds := make([]*localHold, 0, len(s.holds))
		for h := range s.holds {
			holds = append(holds, h)
		}
		s.mu.Unlock()
		for _, l := range leaders {
			l.Release()
		}
		for _, h := range holds {
			h.Release()
		}
		s.closeErr = s.sqlDB.Close()
		// The lock file goes last: another process may open the database as soon as it is free.
		s.lock.unlock()
	})
	return s.closeErr
}

// sqliteErr maps driver errors to the store's: no rows becomes ErrNotFound.
func sqliteErr(what string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("db: %s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("db: %s: %w", what, err)
}

func (s *sqliteStore) LockThread(ctx context.Context, threadKey string) (func(), error) {
	if err := checkThreadKey(threadKey); err != nil {
		return nil, err
	}
	unlock, err := s.threads.lock(ctx, threadKey)
	if err != nil {
		return nil, fmt.Errorf("db: lock thread %s: %w", threadKey, err)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		unlock()
		return nil, fmt.Errorf("db: lock thread %s: %w", threadKey, errClosed)
	}
	return unlock, nil
}

// TryLeader always succeeds: the lock file already makes this the only process.
func (s *sqliteStore) TryLeader(context.Context) (Leader, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, errClosed
	}
	l := &localLeader{s: s, lost: make(chan struct{})}
	s.leaders[l] = struct{}{}
	return l, true, nil
}

type localLeader struct {
	s    *sqliteStore
	lost chan struct{}
	once sync.Once
}

func (l *localLeader) Lost() <-chan struct{} { return l.lost }

func (l *localLeader) Release() {
	l.once.Do(func() {
		l.s.mu.Lock()
		delete(l.s.leaders, l)
		l.s.mu.Unlock()
		close(l.lost)
	})
}
