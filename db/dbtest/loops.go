package dbtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

func keys(ss []db.Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ThreadKey
	}
	return out
}

func testSessionsIdle(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	// Active sessions whose activity is i minutes after start, in scrambled creation order.
	for _, i := range []int{3, 0, 4, 1, 2} {
		createAt(t, s, clock, fmt.Sprintf("active-%d", i), db.SessionActive, start.Add(time.Duration(i)*time.Minute))
	}
	// Old, but not active: never idle candidates.
	createAt(t, s, clock, "paused", db.SessionPaused, start.Add(-time.Hour))
	createAt(t, s, clock, "creating", db.SessionCreating, start.Add(-time.Hour))

	cutoff := start.Add(3 * time.Minute) // strictly before: active-3 is not idle yet
	tests := []struct {
		limit int
		want  []string
	}{
		{limit: 0, want: []string{"active-0", "active-1", "active-2"}},
		{limit: 2, want: []string{"active-0", "active-1"}},
		{limit: 100, want: []string{"active-0", "active-1", "active-2"}},
	}
	for _, tc := range tests {
		got, err := s.SessionsIdle(ctx, cutoff, tc.limit)
		require.NoError(t, err)
		require.Equal(t, tc.want, keys(got), "limit %d", tc.limit)
	}

	// Activity takes a session out of the candidates.
	clock.Advance(time.Hour)
	require.NoError(t, s.SessionTouch(ctx, "active-0", nil))
	got, err := s.SessionsIdle(ctx, cutoff, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"active-1", "active-2"}, keys(got))
}

func testSessionsPausedExpired(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	for _, i := range []int{2, 0, 3, 1} {
		createAt(t, s, clock, fmt.Sprintf("paused-%d", i), db.SessionPaused, start.Add(time.Duration(i)*time.Hour))
	}
	createAt(t, s, clock, "active", db.SessionActive, start.Add(-time.Hour))
	createAt(t, s, clock, "destroyed", db.SessionDestroyed, start.Add(-time.Hour))

	got, err := s.SessionsPausedExpired(ctx, start.Add(3*time.Hour), 0)
	require.NoError(t, err)
	require.Equal(t, []string{"paused-0", "paused-1", "paused-2"}, keys(got))
	for _, sess := range got {
		require.Equal(t, db.SessionPaused, sess.Status)
		require.False(t, sess.PausedAt.IsZero())
	}

	got, err = s.SessionsPausedExpired(ctx, start.Add(3*time.Hour), 1)
	require.NoError(t, err)
	require.Equal(t, []string{"paused-0"}, keys(got))

	got, err = s.SessionsPausedExpired(ctx, start, 10)
	require.NoError(t, err)
	require.Empty(t, got)
}

func testSessionsBySandboxIDs(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	createAt(t, s, clock, "b", db.SessionActive, start)      // sandbox sb-b
	createAt(t, s, clock, "a", db.SessionPaused, start)      // sandbox sb-a
	createAt(t, s, clock, "c", db.SessionDestroyed, start)   // sandbox sb-c: the reaper still sees it
	createAt(t, s, clock, "none", db.SessionCreating, start) // no sandbox yet

	got, err := s.SessionsBySandboxIDs(ctx, []string{"sb-c", "sb-b", "sb-zzz", "sb-a", ""})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, keys(got))

	got, err = s.SessionsBySandboxIDs(ctx, []string{""})
	require.NoError(t, err)
	require.Empty(t, got, `"" means "no sandbox" and matches nothing`)

	got, err = s.SessionsBySandboxIDs(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)

	// A page larger than any one statement's parameter budget still works.
	many := make([]string, 0, 2001)
	for i := range 2000 {
		many = append(many, fmt.Sprintf("sb-unknown-%d", i))
	}
	many = append(many, "sb-a")
	got, err = s.SessionsBySandboxIDs(ctx, many)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, keys(got))

	// An id given twice, far apart (a provider listing a sandbox on two pages), is one session.
	many = append([]string{"sb-a", "sb-b"}, many...)
	got, err = s.SessionsBySandboxIDs(ctx, many)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, keys(got))
}

func testSessionsByStatus(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	for _, k := range []string{"d", "b", "e", "a", "c"} {
		createAt(t, s, clock, k, db.SessionActive, start)
	}
	createAt(t, s, clock, "p", db.SessionPaused, start)

	var all []string
	after := ""
	for {
		page, err := s.SessionsByStatus(ctx, db.SessionActive, after, 2)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 2)
		all = append(all, keys(page)...)
		after = page[len(page)-1].ThreadKey
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, all)

	got, err := s.SessionsByStatus(ctx, db.SessionPaused, "", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p"}, keys(got))

	_, err = s.SessionsByStatus(ctx, "nope", "", 0)
	require.ErrorIs(t, err, db.ErrInvalid)
}

// testSessionsLive: admission's query lists the threads whose sandbox counts against the cap (creating,
// active, resuming, pausing) in key order, the asked thread's first when it is live, so that the
// limit never hides it; paused, destroyed and errored ones are not live.
func testSessionsLive(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	for k, st := range map[string]db.SessionStatus{
		"a": db.SessionActive, "b": db.SessionCreating, "c": db.SessionResuming, "d": db.SessionPausing,
		"e": db.SessionPaused, "f": db.SessionDestroyed, "g": db.SessionError, "z": db.SessionActive,
	} {
		createAt(t, s, clock, k, st, start)
	}
	for _, tc := range []struct {
		thread string
		limit  int
		want   []string
	}{
		{"", 0, []string{"a", "b", "c", "d", "z"}},
		{"z", 2, []string{"z", "a"}}, // live: first, past the limit otherwise
		{"e", 2, []string{"a", "b"}}, // paused: not live, not listed
		{"new", 9, []string{"a", "b", "c", "d", "z"}},
	} {
		got, err := s.SessionsLive(ctx, tc.thread, tc.limit)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "thread %q, limit %d", tc.thread, tc.limit)
	}
}

// testSessionsUnsettled: the reconcile loop's query returns sessions in a transient status or in error
// whose row has not changed since before the cutoff, oldest change first, and nothing stable.
func testSessionsUnsettled(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)
	unsettled := []db.SessionStatus{db.SessionError, db.SessionCreating, db.SessionDestroying, db.SessionResuming, db.SessionPausing}
	for i, st := range unsettled {
		createAt(t, s, clock, fmt.Sprintf("%d-%s", i, st), st, start.Add(time.Duration(i)*time.Minute))
	}
	for _, st := range []db.SessionStatus{db.SessionActive, db.SessionPaused, db.SessionDestroyed} {
		createAt(t, s, clock, "stable-"+string(st), st, start.Add(-time.Hour))
	}
	createAt(t, s, clock, "young-error", db.SessionError, start.Add(time.Hour))

	tests := []struct {
		name   string
		cutoff time.Time
		limit  int
		want   []string
	}{
		{"all old ones, oldest first", start.Add(30 * time.Minute), 0,
			[]string{"0-error", "1-creating", "2-destroying", "3-resuming", "4-pausing"}},
		{"limit", start.Add(30 * time.Minute), 2, []string{"0-error", "1-creating"}},
		{"strictly before the cutoff", start.Add(2 * time.Minute), 10, []string{"0-error", "1-creating"}},
		{"nothing that old", start, 10, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.SessionsUnsettled(ctx, tc.cutoff, tc.limit)
			require.NoError(t, err)
			require.Equal(t, tc.want, nilIfEmpty(keys(got)))
		})
	}

	// A change to the row (here: a patch) makes it young again.
	clock.Set(start.Add(2 * time.Hour))
	_, err := s.SessionUpdate(ctx, "0-error", db.SessionPatch{LastError: ptr("again")})
	require.NoError(t, err)
	got, err := s.SessionsUnsettled(ctx, start.Add(30*time.Minute), 0)
	require.NoError(t, err)
	require.Equal(t, []string{"1-creating", "2-destroying", "3-resuming", "4-pausing"}, keys(got))
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
