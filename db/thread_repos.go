package db

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
	"github.com/threadbox/threadbox/db/internal/sqlitesqlc"
)

// ThreadRepo is the repository a thread works on (table thread_repos). Times are UTC; a zero
// PushedAt means never pushed.
type ThreadRepo struct {
	ThreadKey string
	// Repo is host/owner/name.
	Repo string
	// BaseBranch is the branch the thread starts from ("" is the repository's default).
	BaseBranch string
	// WorkBranch is the thread's own branch (threadbox/…).
	WorkBranch string
	// PushedCommit is the work branch's commit after the thread's last push ("" before the first).
	PushedCommit string
	PushedAt     time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ThreadRepoStore keeps each thread's repository, so the choice survives restarts and the ops view
// can show it without asking a sandbox.
type ThreadRepoStore interface {
	// ThreadRepoGet returns the thread's repository, or ErrNotFound when it has none recorded.
	ThreadRepoGet(ctx context.Context, threadKey string) (ThreadRepo, error)
	// ThreadRepoSet chooses the thread's repository. Choosing another repository forgets the push
	// record (it was of the other repository); choosing the same one keeps it.
	ThreadRepoSet(ctx context.Context, r ThreadRepo) (ThreadRepo, error)
	// ThreadRepoPin records r unless the thread has a repository already, and returns the thread's
	// row either way.
	ThreadRepoPin(ctx context.Context, r ThreadRepo) (ThreadRepo, error)
	// ThreadRepoPushed records that the thread's branch was pushed at commit, if the thread is still
	// on repo; ErrNotFound otherwise.
	ThreadRepoPushed(ctx context.Context, threadKey, repo, commit string) (ThreadRepo, error)
	// ThreadReposByKeys returns the rows of these threads that exist, ordered by thread key.
	ThreadReposByKeys(ctx context.Context, threadKeys []string) ([]ThreadRepo, error)
}

func (r ThreadRepo) check() error {
	if err := checkThreadKey(r.ThreadKey); err != nil {
		return err
	}
	if strings.TrimSpace(r.Repo) == "" {
		return invalidf("thread repository for %s has no repository", r.ThreadKey)
	}
	// Names, not free text: refused rather than altered (PostgreSQL cannot store these, SQLite can).
	for what, v := range map[string]string{"repository": r.Repo, "base branch": r.BaseBranch, "work branch": r.WorkBranch} {
		if err := checkKeyText(what, v); err != nil {
			return err
		}
	}
	return nil
}

// Postgres.

func fromPGThreadRepo(r pgsqlc.ThreadRepo) ThreadRepo {
	return ThreadRepo{
		ThreadKey: r.ThreadKey, Repo: r.Repo, BaseBranch: r.BaseBranch, WorkBranch: r.WorkBranch,
		PushedCommit: r.PushedCommit, PushedAt: fromPGTime(r.PushedAt), CreatedAt: fromPGTime(r.CreatedAt),
		UpdatedAt: fromPGTime(r.UpdatedAt),
	}
}

func (s *pgStore) ThreadRepoGet(ctx context.Context, threadKey string) (ThreadRepo, error) {
	if !storableKey(threadKey) {
		return ThreadRepo{}, noRow("get thread repository", threadKey)
	}
	r, err := s.q.ThreadRepoGet(ctx, s.dbtx, threadKey)
	if err != nil {
		return ThreadRepo{}, pgErr("get thread repository "+threadKey, err)
	}
	return fromPGThreadRepo(r), nil
}

func (s *pgStore) ThreadRepoSet(ctx context.Context, tr ThreadRepo) (ThreadRepo, error) {
	if err := tr.check(); err != nil {
		return ThreadRepo{}, err
	}
	r, err := s.q.ThreadRepoSet(ctx, s.dbtx, pgsqlc.ThreadRepoSetParams{
		ThreadKey: tr.ThreadKey, Repo: tr.Repo, BaseBranch: tr.BaseBranch, WorkBranch: tr.WorkBranch, Now: pgTime(s.now()),
	})
	if err != nil {
		return ThreadRepo{}, pgErr("set thread repository "+tr.ThreadKey, err)
	}
	return fromPGThreadRepo(r), nil
}

func (s *pgStore) ThreadRepoPin(ctx context.Context, tr ThreadRepo) (ThreadRepo, error) {
	if err := tr.check(); err != nil {
		return ThreadRepo{}, err
	}
	r, err := s.q.ThreadRepoPin(ctx, s.dbtx, pgsqlc.ThreadRepoPinParams{
		ThreadKey: tr.ThreadKey, Repo: tr.Repo, BaseBranch: tr.BaseBranch, WorkBranch: tr.WorkBranch, Now: pgTime(s.now()),
	})
	if err != nil {
		// ON CONFLICT DO NOTHING returns no row: the thread has its repository already.
		if err = pgErr("pin thread repository "+tr.ThreadKey, err); errors.Is(err, ErrNotFound) {
			return s.ThreadRepoGet(ctx, tr.ThreadKey)
		}
		return ThreadRepo{}, err
	}
	return fromPGThreadRepo(r), nil
}

func (s *pgStore) ThreadRepoPushed(ctx context.Context, threadKey, repo, commit string) (ThreadRepo, error) {
	if !storableKey(threadKey, repo, commit) {
		return ThreadRepo{}, noRow("record the push of", threadKey)
	}
	r, err := s.q.ThreadRepoPushed(ctx, s.dbtx, pgsqlc.ThreadRepoPushedParams{
		ThreadKey: threadKey, Repo: repo, PushedCommit: commit, Now: pgTime(s.now()),
	})
	if err != nil {
		return ThreadRepo{}, pgErr("record the push of "+threadKey, err)
	}
	return fromPGThreadRepo(r), nil
}

func (s *pgStore) ThreadReposByKeys(ctx context.Context, keys []string) ([]ThreadRepo, error) {
	keys = nonEmpty(keys)
	if len(keys) == 0 {
		return nil, nil
	}
	rows, err := s.q.ThreadRepoListByKeys(ctx, s.dbtx, keys)
	if err != nil {
		return nil, pgErr("list thread repositories", err)
	}
	out := make([]ThreadRepo, len(rows))
	for i, r := range rows {
		out[i] = fromPGThreadRepo(r)
	}
	return out, nil
}

// SQLite.

func fromSQLiteThreadRepo(r sqlitesqlc.ThreadRepo) (ThreadRepo, error) {
	var p sqliteTimes
	out := ThreadRepo{
		ThreadKey: r.ThreadKey, Repo: r.Repo, BaseBranch: r.BaseBranch, WorkBranch: r.WorkBranch,
		PushedCommit: r.PushedCommit, PushedAt: p.null("pushed_at", r.PushedAt),
		CreatedAt: p.parse("created_at", r.CreatedAt), UpdatedAt: p.parse("updated_at", r.UpdatedAt),
	}
	return out, p.err
}

func (s *sqliteStore) ThreadRepoGet(ctx context.Context, threadKey string) (ThreadRepo, error) {
	r, err := s.q.ThreadRepoGet(ctx, s.dbtx, threadKey)
	if err != nil {
		return ThreadRepo{}, sqliteErr("get thread repository "+threadKey, err)
	}
	return fromSQLiteThreadRepo(r)
}

func (s *sqliteStore) ThreadRepoSet(ctx context.Context, tr ThreadRepo) (ThreadRepo, error) {
	if err := tr.check(); err != nil {
		return ThreadRepo{}, err
	}
	r, err := s.q.ThreadRepoSet(ctx, s.dbtx, sqlitesqlc.ThreadRepoSetParams{
		ThreadKey: tr.ThreadKey, Repo: tr.Repo, BaseBranch: tr.BaseBranch, WorkBranch: tr.WorkBranch, Now: s.clock(),
	})
	if err != nil {
		return ThreadRepo{}, sqliteErr("set thread repository "+tr.ThreadKey, err)
	}
	return fromSQLiteThreadRepo(r)
}

func (s *sqliteStore) ThreadRepoPin(ctx context.Context, tr ThreadRepo) (ThreadRepo, error) {
	if err := tr.check(); err != nil {
		return ThreadRepo{}, err
	}
	r, err := s.q.ThreadRepoPin(ctx, s.dbtx, sqlitesqlc.ThreadRepoPinParams{
		ThreadKey: tr.ThreadKey, Repo: tr.Repo, BaseBranch: tr.BaseBranch, WorkBranch: tr.WorkBranch, Now: s.clock(),
	})
	if err != nil {
		if err = sqliteErr("pin thread repository "+tr.ThreadKey, err); errors.Is(err, ErrNotFound) {
			return s.ThreadRepoGet(ctx, tr.ThreadKey)
		}
		return ThreadRepo{}, err
	}
	return fromSQLiteThreadRepo(r)
}

func (s *sqliteStore) ThreadRepoPushed(ctx context.Context, threadKey, repo, commit string) (ThreadRepo, error) {
	r, err := s.q.ThreadRepoPushed(ctx, s.dbtx, sqlitesqlc.ThreadRepoPushedParams{
		ThreadKey: threadKey, Repo: repo, PushedCommit: commit, Now: sqliteNullTime(s.now()),
	})
	if err != nil {
		return ThreadRepo{}, sqliteErr("record the push of "+threadKey, err)
	}
	return fromSQLiteThreadRepo(r)
}

func (s *sqliteStore) ThreadReposByKeys(ctx context.Context, keys []string) ([]ThreadRepo, error) {
	keys = nonEmpty(keys)
	var out []ThreadRepo
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), sqliteIDChunk)]
		keys = keys[len(chunk):]
		rows, err := s.q.ThreadRepoListByKeys(ctx, s.dbtx, chunk)
		if err != nil {
			return nil, sqliteErr("list thread repositories", err)
		}
		for _, r := range rows {
			tr, err := fromSQLiteThreadRepo(r)
			if err != nil {
				return nil, err
			}
			out = append(out, tr)
		}
	}
	slices.SortFunc(out, func(a, b ThreadRepo) int { return strings.Compare(a.ThreadKey, b.ThreadKey) })
	return out, nil
}
