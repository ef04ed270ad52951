package dbtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
)

// testThreadRepos: a thread's repository is chosen, pinned, pushed and moved, and read back the same
// on both engines.
func testThreadRepos(t *testing.T, newStore NewStore) {
	clock := NewClock(start)
	s := newStore(t, db.WithClock(clock.Now))
	ctx := testCtx(t)

	_, err := s.ThreadRepoGet(ctx, "k")
	require.ErrorIs(t, err, db.ErrNotFound)
	_, err = s.ThreadRepoPushed(ctx, "k", "h/o/a", "c0")
	require.ErrorIs(t, err, db.ErrNotFound, "a push of a thread with no repository records nothing")
	_, err = s.ThreadRepoSet(ctx, db.ThreadRepo{ThreadKey: "k"})
	require.ErrorIs(t, err, db.ErrInvalid)

	// A default pinned by the first checkout.
	pinned, err := s.ThreadRepoPin(ctx, db.ThreadRepo{ThreadKey: "k", Repo: "h/o/a", WorkBranch: "threadbox/1"})
	require.NoError(t, err)
	require.Equal(t, db.ThreadRepo{
		ThreadKey: "k", Repo: "h/o/a", WorkBranch: "threadbox/1", CreatedAt: utcMicro(start), UpdatedAt: utcMicro(start),
	}, pinned)
	// A second pin does not move it.
	clock.Advance(time.Minute)
	again, err := s.ThreadRepoPin(ctx, db.ThreadRepo{ThreadKey: "k", Repo: "h/o/other", WorkBranch: "threadbox/1"})
	require.NoError(t, err)
	require.Equal(t, pinned, again)

	// A push is recorded while the thread is on that repository, and only then.
	clock.Advance(time.Minute)
	pushed, err := s.ThreadRepoPushed(ctx, "k", "h/o/a", "c1")
	require.NoError(t, err)
	require.Equal(t, "c1", pushed.PushedCommit)
	require.Equal(t, utcMicro(start.Add(2*time.Minute)), pushed.PushedAt)
	_, err = s.ThreadRepoPushed(ctx, "k", "h/o/other", "c2")
	require.ErrorIs(t, err, db.ErrNotFound)

	// Choosing the same repository (another base branch) keeps the push record.
	clock.Advance(time.Minute)
	same, err := s.ThreadRepoSet(ctx, db.ThreadRepo{ThreadKey: "k", Repo: "h/o/a", BaseBranch: "dev", WorkBranch: "threadbox/1"})
	require.NoError(t, err)
	require.Equal(t, db.ThreadRepo{
		ThreadKey: "k", Repo: "h/o/a", BaseBranch: "dev", WorkBranch: "threadbox/1", PushedCommit: "c1",
		PushedAt: utcMicro(start.Add(2 * time.Minute)), CreatedAt: utcMicro(start), UpdatedAt: utcMicro(start.Add(3 * time.Minute)),
	}, same)

	// Moving to another repository forgets the push, which was of the old one.
	moved, err := s.ThreadRepoSet(ctx, db.ThreadRepo{ThreadKey: "k", Repo: "h/o/b", WorkBranch: "threadbox/1"})
	require.NoError(t, err)
	require.Equal(t, db.ThreadRepo{
		ThreadKey: "k", Repo: "h/o/b", WorkBranch: "threadbox/1", CreatedAt: utcMicro(start), UpdatedAt: utcMicro(start.Add(3 * time.Minute)),
	}, moved)
	got, err := s.ThreadRepoGet(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, moved, got)

	// Set on a new thread inserts.
	other, err := s.ThreadRepoSet(ctx, db.ThreadRepo{ThreadKey: "j", Repo: "h/o/c"})
	require.NoError(t, err)

	list, err := s.ThreadReposByKeys(ctx, []string{"zzz", "k", "", "j"})
	require.NoError(t, err)
	require.Equal(t, []db.ThreadRepo{other, moved}, list)
	// A key given twice, far apart, is one row.
	dup := []string{"j", "k"}
	for i := range 1200 {
		dup = append(dup, fmt.Sprintf("unknown-%d", i))
	}
	dup = append(dup, "k", "j")
	list, err = s.ThreadReposByKeys(ctx, dup)
	require.NoError(t, err)
	require.Equal(t, []db.ThreadRepo{other, moved}, list)
	list, err = s.ThreadReposByKeys(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, list)
}

// testThreadRepoUnstorable: a repository or branch name with NUL or invalid UTF-8 (a user types the
// repository; a branch may come from the forge) is refused as invalid on both engines. PostgreSQL
// failed with a raw driver error while SQLite stored it.
func testThreadRepoUnstorable(t *testing.T, newStore NewStore) {
	s := newStore(t)
	ctx := testCtx(t)
	for _, bad := range []string{"x\x00", "x\xff"} {
		for name, r := range map[string]db.ThreadRepo{
			"repo":        {ThreadKey: "k", Repo: "h/o/" + bad},
			"base branch": {ThreadKey: "k", Repo: "h/o/r", BaseBranch: bad},
			"work branch": {ThreadKey: "k", Repo: "h/o/r", WorkBranch: bad},
		} {
			_, err := s.ThreadRepoSet(ctx, r)
			require.ErrorIs(t, err, db.ErrInvalid, "%s %q", name, bad)
			_, err = s.ThreadRepoPin(ctx, r)
			require.ErrorIs(t, err, db.ErrInvalid, "%s %q", name, bad)
		}
	}
	_, err := s.ThreadRepoGet(ctx, "k")
	require.ErrorIs(t, err, db.ErrNotFound, "nothing was stored")
}
