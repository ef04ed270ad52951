package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// DefaultPostgresURL is the server deploy/test-services.sh starts.
const DefaultPostgresURL = "postgres://threadbox:threadbox@127.0.0.1:5432/threadbox_test?sslmode=disable"

// RequireServices reports whether THREADBOX_REQUIRE_SERVICES is set: then a missing service fails
// the test instead of skipping it (make test sets it, so CI cannot pass by skipping).
func RequireServices() bool { return os.Getenv("THREADBOX_REQUIRE_SERVICES") != "" }

// PostgresURL returns the test server's URL (THREADBOX_TEST_POSTGRES_URL, else DefaultPostgresURL)
// once it answers. If it does not, the test is skipped, or fails when RequireServices.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("THREADBOX_TEST_POSTGRES_URL")
	if u == "" {
		u = DefaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err == nil {
		err = conn.Ping(ctx)
		_ = conn.Close(ctx)
	}
	if err != nil {
		if RequireServices() {
			t.Fatalf("PostgreSQL is required (THREADBOX_REQUIRE_SERVICES is set) but does not answer: %v; run deploy/test-services.sh", err)
		}
		t.Skipf("PostgreSQL not available (%v); run deploy/test-services.sh", err)
	}
	return u
}

// PostgresSchemaURL creates an empty schema on the test server and returns a URL whose connections
// use it (search_path). The schema is dropped when the test ends. Stores opened on it are isolated
// from other tests, including their advisory locks (the default lock namespace is the schema).
func PostgresSchemaURL(t testing.TB) string {
	t.Helper()
	base := PostgresURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "tbtest_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// OpenPostgres returns a migrated Store on a fresh schema; it is closed when the test ends.
func OpenPostgres(t testing.TB, opts ...db.Option) db.Store {
	t.Helper()
	return OpenURL(t, PostgresSchemaURL(t), opts...)
}

// OpenSQLite returns a migrated Store on a new file in t.TempDir(); it is closed when the test ends.
func OpenSQLite(t testing.TB, opts ...db.Option) db.Store {
	t.Helper()
	return OpenURL(t, "sqlite:"+filepath.Join(t.TempDir(), "threadbox.db"), opts...)
}

// OpenURL opens and migrates url, closing the store when the test ends.
func OpenURL(t testing.TB, url string, opts ...db.Option) db.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := db.Open(ctx, url, append([]db.Option{db.WithMigrate()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// Clock is a settable clock for db.WithClock. The zero value is not usable: use NewClock.
type Clock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (which may be negative) and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set moves the clock to t and returns the time it showed before.
func (c *Clock) Set(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.now
	c.now = t
	return prev
}

// TerminateThreadLock kills (pg_terminate_backend) the PostgreSQL backend holding threadKey's lock
// on s, as a crash or a network cut would, and returns how many it killed.
func TerminateThreadLock(t testing.TB, s db.Store, threadKey string) int {
	t.Helper()
	args, ok := db.ThreadLockArgs(s, threadKey)
	require.True(t, ok, "a PostgreSQL store")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, PostgresURL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM ("+db.ThreadLockHolders+") h", args...).Scan(&n))
	return n
}

// DefaultRedisURL is the Redis deploy/test-services.sh starts.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// Redis returns a client on the test Redis (THREADBOX_TEST_REDIS_URL, else DefaultRedisURL) once it
// answers; it is closed when the test ends. If Redis does not answer, the test is skipped, or fails
// when RequireServices.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	u := os.Getenv("THREADBOX_TEST_REDIS_URL")
	if u == "" {
		u = DefaultRedisURL
	}
	opt, err := redis.ParseURL(u)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if RequireServices() {
			t.Fatalf("Redis is required (THREADBOX_REQUIRE_SERVICES is set) but does not answer: %v; run deploy/test-services.sh", err)
		}
		t.Skipf("Redis not available (%v); run deploy/test-services.sh", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
