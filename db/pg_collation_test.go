package db_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// TestPostgresOrderIgnoresDatabaseCollation: listings ordered by thread key (and usage ranks tied on
// tokens, by name) come in byte order, as on SQLite and as the store's own merges sort, whatever
// collation the database was created with. Under a linguistic one ("B" after "a") PostgreSQL sorted
// differently from SQLite, and from the byte-order cursor callers resume from.
func TestPostgresOrderIgnoresDatabaseCollation(t *testing.T) {
	t.Parallel()
	ctx := pgCtx(t)
	admin := pgAdmin(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tbtest_icu_" + hex.EncodeToString(b[:])
	_, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'und' LOCALE 'C.UTF-8'")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") })
	u, err := url.Parse(dbtest.PostgresURL(t))
	require.NoError(t, err)
	u.Path = "/" + name
	s := dbtest.OpenURL(t, u.String())

	keys := []string{"ab", "B", "a-c", "a", "Z"}
	want := slices.Clone(keys)
	slices.Sort(want) // byte order: B Z a a-c ab
	var sandboxes []string
	for _, k := range keys {
		_, _, err := s.SessionCreate(ctx, db.NewSession{ThreadKey: k, Status: db.SessionActive})
		require.NoError(t, err)
		_, err = s.SessionUpdate(ctx, k, db.SessionPatch{SandboxID: ptr("sb-" + k)})
		require.NoError(t, err)
		sandboxes = append(sandboxes, "sb-"+k)
		_, err = s.ThreadRepoSet(ctx, db.ThreadRepo{ThreadKey: k, Repo: "h/o/r"})
		require.NoError(t, err)
	}

	var paged []string
	after := ""
	for {
		page, err := s.SessionsByStatus(ctx, db.SessionActive, after, 2)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			paged = append(paged, p.ThreadKey)
		}
		after = page[len(page)-1].ThreadKey
	}
	require.Equal(t, want, paged, "SessionsByStatus pages")

	byID, err := s.SessionsBySandboxIDs(ctx, sandboxes)
	require.NoError(t, err)
	var got []string
	for _, p := range byID {
		got = append(got, p.ThreadKey)
	}
	require.Equal(t, want, got, "SessionsBySandboxIDs")

	repos, err := s.ThreadReposByKeys(ctx, keys)
	require.NoError(t, err)
	got = nil
	for _, r := range repos {
		got = append(got, r.ThreadKey)
	}
	require.Equal(t, want, got, "ThreadReposByKeys")

	// Usage ranks tied on tokens.
	for i, k := range []string{"a", "B"} {
		turn, err := s.TurnInsert(ctx, db.NewTurn{ThreadKey: k, PlatformEventID: "ev-" + k, UserID: []string{"B", "a"}[i], Prompt: "p"})
		require.NoError(t, err)
		_, err = s.TurnStart(ctx, turn.ID, "")
		require.NoError(t, err)
		require.NoError(t, s.TurnAddUsage(ctx, turn.ID, 5, 5, 0))
	}
	top, err := s.TurnUsageTop(ctx, time.Time{}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"B", "a"}, []string{top.Threads[0].Name, top.Threads[1].Name}, "TurnUsageTop threads")
	require.Equal(t, []string{"B", "a"}, []string{top.Users[0].Name, top.Users[1].Name}, "TurnUsageTop users")
}

func ptr[T any](v T) *T { return &v }
