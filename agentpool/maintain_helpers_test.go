package agentpool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
)

// maintStoreCase is one real store the loop tests run on, with the clock it writes times by.
type maintStoreCase struct {
	name string
	open func(t *testing.T, clock *dbtest.Clock) db.Store
}

// maintStores are SQLite (always) and PostgreSQL (skipped when absent, unless
// THREADBOX_REQUIRE_SERVICES is set, which makes its absence a failure).
var maintStores = []maintStoreCase{
	{"sqlite", func(t *testing.T, c *dbtest.Clock) db.Store { return dbtest.OpenSQLite(t, db.WithClock(c.Now)) }},
	{"postgres", func(t *testing.T, c *dbtest.Clock) db.Store { return dbtest.OpenPostgres(t, db.WithClock(c.Now)) }},
}

// forEachMaintStore runs f as a subtest per store, each with a fresh store and a clock that starts at
// the real time (so that sandboxes created by real providers are "now" too) and only moves when told.
func forEachMaintStore(t *testing.T, f func(t *testing.T, st db.Store, clock *dbtest.Clock)) {
	for _, sc := range maintStores {
		t.Run(sc.name, func(t *testing.T) {
			clock := dbtest.NewClock(time.Now().UTC().Truncate(time.Millisecond))
			f(t, sc.open(t, clock), clock)
		})
	}
}

// newTestMaintainer builds a Maintainer on the shared clock, with a lock wait of one second: a busy
// thread costs the test a second, and a free thread's lock is had well within it even on a loaded
// machine (20 ms was not: on PostgreSQL the wait includes opening a lock connection, and a loaded CI
// run counted free threads as busy).
func newTestMaintainer(t *testing.T, cfg MaintainerConfig, st db.Store, prov sandbox.Provider, deployment string, clock *dbtest.Clock, onStuck func(context.Context, db.Turn)) *Maintainer {
	t.Helper()
	m, err := NewMaintainer(cfg, MaintainerDeps{
		Store: st, Provider: prov, Deployment: deployment, Logger: zaptest.NewLogger(t),
		Now: clock.Now, OnStuck: onStuck,
	})
	require.NoError(t, err)
	m.lockWait = time.Second
	return m
}

// activeSessionFor records an active session owning the sandbox h.
func activeSessionFor(t *testing.T, st db.Store, thread string, h sandbox.Handle) db.Session {
	t.Helper()
	ctx := context.Background()
	_, created, err := st.SessionCreate(ctx, db.NewSession{ThreadKey: thread, Platform: "test", Provider: h.Provider, Status: db.SessionActive})
	require.NoError(t, err)
	require.True(t, created)
	raw, err := json.Marshal(h)
	require.NoError(t, err)
	s, err := st.SessionUpdate(ctx, thread, db.SessionPatch{Handle: raw, SandboxID: &h.ID})
	require.NoError(t, err)
	return s
}

func sessionStatus(t *testing.T, st db.Store, thread string) db.Session {
	t.Helper()
	s, err := st.SessionGet(context.Background(), thread)
	require.NoError(t, err)
	return s
}

func maintRandom() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// maintainerGoroutines counts goroutines running Maintainer code, from a full stack dump.
func maintainerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "agentpool.(*Maintainer)")
		}
		buf = make([]byte, 2*len(buf))
	}
}
