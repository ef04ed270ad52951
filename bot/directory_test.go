package bot

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

func newSQLite(t *testing.T) db.Store {
	t.Helper()
	st, err := db.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "tb.db"), db.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func createSession(t *testing.T, st db.Store, key string, status db.SessionStatus) {
	t.Helper()
	_, created, err := st.SessionCreate(t.Context(), db.NewSession{ThreadKey: key, Platform: "web", Provider: "docker", Runtime: "shell", Status: status})
	require.NoError(t, err)
	require.True(t, created, key)
}

func TestDirectorySessionAndHistory(t *testing.T) {
	ctx := t.Context()
	st := newSQLite(t)
	dir := NewDirectory(st)
	thread := WebThread("c1")

	_, found, err := dir.Session(ctx, thread)
	require.NoError(t, err)
	require.False(t, found, "no session yet is not an error")
	has, err := dir.HasSession(ctx, thread)
	require.NoError(t, err)
	require.False(t, has)

	createSession(t, st, thread.String(), db.SessionPaused)
	s, found, err := dir.Session(ctx, thread)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, thread.String(), s.ThreadKey)
	require.Equal(t, SessionStatus("paused"), s.Status)
	require.Equal(t, "docker", s.Provider)
	require.False(t, s.CreatedAt.IsZero())
	has, err = dir.HasSession(ctx, thread)
	require.NoError(t, err)
	require.True(t, has)

	for i, res := range []db.TurnResult{
		{Status: db.TurnDone, Answer: "one"},
		{Status: db.TurnCancelled},
		{Status: db.TurnFailed, Error: "boom"},
	} {
		tr, err := st.TurnInsert(ctx, db.NewTurn{ThreadKey: thread.String(), PlatformEventID: fmt.Sprint("ev", i), UserID: "u", Prompt: fmt.Sprint("p", i)})
		require.NoError(t, err)
		_, err = st.TurnFinish(ctx, tr.ID, res)
		require.NoError(t, err)
	}
	hist, err := dir.History(ctx, thread, 2, 1<<20)
	require.NoError(t, err)
	require.Len(t, hist, 2, "maxTurns caps the history")
	require.Equal(t, TurnView{EventID: "ev1", UserID: "u", Prompt: "p1", Status: TurnCancelled,
		CreatedAt: hist[0].CreatedAt, FinishedAt: hist[0].FinishedAt}, hist[0], "oldest first")
	require.Equal(t, "ev2", hist[1].EventID)
	require.Equal(t, TurnFailed, hist[1].Status)
	require.Equal(t, "boom", hist[1].Error)
	require.False(t, hist[1].FinishedAt.IsZero())
}

func TestDirectoryPlatformSessionsPagesAndStopsAtThePrefix(t *testing.T) {
	ctx := t.Context()
	st := newSQLite(t)
	dir := NewDirectory(st)
	// More active web sessions than one page, with neighbours on both sides of the web: run.
	for i := range db.DefaultBatch + 5 {
		createSession(t, st, fmt.Sprintf("web:a%03d", i), db.SessionActive)
	}
	createSession(t, st, "slack:T:C:1", db.SessionActive)
	createSession(t, st, "webx:1", db.SessionActive) // sorts right after the web: keys
	createSession(t, st, "web:p1", db.SessionPaused)

	got, err := dir.PlatformSessions(ctx, "web", 1000)
	require.NoError(t, err)
	require.Len(t, got, db.DefaultBatch+6)
	require.Equal(t, "web:a000", got[0].ThreadKey)
	require.Equal(t, "web:p1", got[len(got)-1].ThreadKey, "statuses in SessionStatuses order: active before paused")
	for _, s := range got {
		require.Regexp(t, `^web:`, s.ThreadKey)
	}

	few, err := dir.PlatformSessions(ctx, "web", 3)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(few), 3)
	require.LessOrEqual(t, len(few), 3+db.DefaultBatch, "stops within a page of max")
}

func TestDirectorySessions(t *testing.T) {
	ctx := t.Context()
	st := newSQLite(t)
	dir := NewDirectory(st)
	createSession(t, st, "web:a", db.SessionActive)
	createSession(t, st, "slack:T:C:1", db.SessionError)

	all, truncated, err := dir.Sessions(ctx, "")
	require.NoError(t, err)
	require.False(t, truncated)
	require.Len(t, all, 2)
	require.Equal(t, []string{"web:a", "slack:T:C:1"}, []string{all[0].ThreadKey, all[1].ThreadKey})

	errs, _, err := dir.Sessions(ctx, "error")
	require.NoError(t, err)
	require.Len(t, errs, 1)
	require.Equal(t, SessionStatus("error"), errs[0].Status)

	_, _, err = dir.Sessions(ctx, "sleeping")
	require.ErrorIs(t, err, ErrUnknownStatus)
	require.EqualError(t, err, "unknown status sleeping")
}
