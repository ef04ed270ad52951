package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/threadbox/threadbox/db/internal/sqlitesqlc"
)

func (s *sqliteStore) TurnInsert(ctx context.Context, t NewTurn) (Turn, error) {
	if err := t.check(); err != nil {
		return Turn{}, err
	}
	t = t.clean()
	r, err := s.q.TurnInsert(ctx, s.dbtx, sqlitesqlc.TurnInsertParams{
		ThreadKey:       t.ThreadKey,
		PlatformEventID: t.PlatformEventID,
		UserID:          t.UserID,
		Prompt:          t.Prompt,
		Now:             s.clock(),
		Delivery:        sqliteJSON(t.Delivery),
		Owner:           t.Owner,
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Turn{}, fmt.Errorf("db: insert turn for event %s: %w", t.PlatformEventID, ErrDuplicate)
	}
	if err != nil {
		return Turn{}, sqliteErr("insert turn", err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnGet(ctx context.Context, id int64) (Turn, error) {
	r, err := s.q.TurnGet(ctx, s.dbtx, id)
	if err != nil {
		return Turn{}, sqliteErr("get turn "+turnKey(id), err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnGetByEvent(ctx context.Context, eventID string) (Turn, error) {
	r, err := s.q.TurnGetByEvent(ctx, s.dbtx, eventID)
	if err != nil {
		return Turn{}, sqliteErr("get turn for event "+eventID, err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnStart(ctx context.Context, id int64, owner string) (Turn, error) {
	r, err := s.q.TurnStart(ctx, s.dbtx, sqlitesqlc.TurnStartParams{Now: sqliteNullTime(s.now()), ID: id, Owner: owner})
	if errors.Is(err, sql.ErrNoRows) {
		return Turn{}, s.turnTransitionFailed(ctx, id, TurnRunning, TurnQueued)
	}
	if err != nil {
		return Turn{}, sqliteErr("start turn "+turnKey(id), err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnStartFirst(ctx context.Context, id int64, owner string) (Turn, error) {
	r, err := s.q.TurnStartFirst(ctx, s.dbtx, sqlitesqlc.TurnStartFirstParams{Now: sqliteNullTime(s.now()), ID: id, Owner: owner})
	if errors.Is(err, sql.ErrNoRows) {
		return Turn{}, fmt.Errorf("db: start turn %s first: %w", turnKey(id), ErrConflict)
	}
	if err != nil {
		return Turn{}, sqliteErr("start turn "+turnKey(id), err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnTouch(ctx context.Context, id int64) error {
	n, err := s.q.TurnTouch(ctx, s.dbtx, sqlitesqlc.TurnTouchParams{Now: s.clock(), ID: id})
	if err != nil {
		return sqliteErr("touch turn "+turnKey(id), err)
	}
	if n == 0 {
		return s.turnTransitionFailed(ctx, id, TurnRunning, TurnRunning)
	}
	return nil
}

func (s *sqliteStore) TurnFinish(ctx context.Context, id int64, res TurnResult) (Turn, error) {
	if err := res.check(); err != nil {
		return Turn{}, err
	}
	res = res.clean()
	r, err := s.q.TurnFinish(ctx, s.dbtx, sqlitesqlc.TurnFinishParams{
		ToStatus: string(res.Status),
		Answer:   res.Answer,
		Error:    res.Error,
		Usage:    sqliteJSON(res.Usage),
		Now:      sqliteNullTime(s.now()),
		ID:       id,
		Owner:    res.Owner,
	})
	if errors.Is(err, sql.ErrNoRows) {
		cur, err := s.TurnGet(ctx, id)
		if err != nil {
			return Turn{}, err
		}
		return Turn{}, turnFinishError(cur, res)
	}
	if err != nil {
		return Turn{}, sqliteErr("finish turn "+turnKey(id), err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) turnTransitionFailed(ctx context.Context, id int64, to TurnStatus, from ...TurnStatus) error {
	cur, err := s.TurnGet(ctx, id)
	if err != nil {
		return err
	}
	return turnTransitionError(id, cur.Status, to, from)
}

func (s *sqliteStore) TurnTranscript(ctx context.Context, threadKey string, l TranscriptLimit) ([]Turn, error) {
	l = l.withDefaults()
	rows, err := s.q.TurnListTranscript(ctx, s.dbtx, sqlitesqlc.TurnListTranscriptParams{
		ThreadKey: threadKey, MaxRows: int64(l.MaxTurns), AfterID: l.AfterID, MaxChars: int64(l.MaxChars), MaxTurnChars: int64(l.maxTurnChars()),
	})
	if err != nil {
		return nil, sqliteErr("transcript of "+threadKey, err)
	}
	turns, err := fromSQLiteTurns(rows)
	if err != nil {
		return nil, err
	}
	// The query has applied the character cap already (see trimTranscript).
	return trimTranscript(turns, l.MaxChars), nil
}

func (s *sqliteStore) TurnsStuck(ctx context.Context, cutoff time.Time, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListStuck(ctx, s.dbtx, sqlitesqlc.TurnListStuckParams{
		Cutoff: sqliteBound(cutoff), MaxRows: int64(batchLimit(limit)),
	})
	if err != nil {
		return nil, sqliteErr("list stuck turns", err)
	}
	return fromSQLiteTurns(rows)
}

func (s *sqliteStore) ArtifactRecord(ctx context.Context, a NewArtifact) (Artifact, error) {
	if err := a.check(); err != nil {
		return Artifact{}, err
	}
	a = a.clean()
	r, err := s.q.ArtifactInsert(ctx, s.dbtx, sqlitesqlc.ArtifactInsertParams{
		Path:           a.Path,
		Sha256:         a.SHA256,
		Size:           a.Size,
		Now:            s.clock(),
		PlatformFileID: a.PlatformFileID,
		TurnID:         a.TurnID,
	})
	if err != nil {
		// No row means the turn does not exist.
		return Artifact{}, sqliteErr(fmt.Sprintf("record artifact %s of turn %d", a.Path, a.TurnID), err)
	}
	return fromSQLiteArtifact(r)
}

func (s *sqliteStore) ArtifactLookup(ctx context.Context, threadKey, path, sha256 string) (Artifact, error) {
	// As ArtifactRecord stored them; a thread key that is not storable has no artifacts (and finds none).
	threadKey, path, sha256 = storableText(threadKey), storableText(path), storableText(sha256)
	r, err := s.q.ArtifactGetByPathSHA(ctx, s.dbtx, sqlitesqlc.ArtifactGetByPathSHAParams{
		ThreadKey: threadKey, Path: path, Sha256: sha256,
	})
	if err != nil {
		return Artifact{}, sqliteErr("look up artifact "+path, err)
	}
	return fromSQLiteArtifact(r)
}

func (s *sqliteStore) AuditAppend(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	e, err := e.normalize()
	if err != nil {
		return AuditEntry{}, err
	}
	r, err := s.q.AuditInsert(ctx, s.dbtx, sqlitesqlc.AuditInsertParams{
		Now: s.clock(), Actor: e.Actor, Action: e.Action, Target: e.Target, Result: e.Result,
	})
	if err != nil {
		return AuditEntry{}, sqliteErr("append audit entry", err)
	}
	return fromSQLiteAudit(r)
}

func (s *sqliteStore) AuditList(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	rows, err := s.q.AuditList(ctx, s.dbtx, sqlitesqlc.AuditListParams{
		BeforeID: auditBefore(q.BeforeID), MaxRows: int64(batchLimit(q.Limit)),
	})
	if err != nil {
		return nil, sqliteErr("list audit log", err)
	}
	out := make([]AuditEntry, len(rows))
	for i, r := range rows {
		if out[i], err = fromSQLiteAudit(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *sqliteStore) TurnsPending(ctx context.Context, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListPending(ctx, s.dbtx, sqlitesqlc.TurnListPendingParams{AfterID: afterID, MaxRows: int64(batchLimit(limit))})
	if err != nil {
		return nil, sqliteErr("list pending turns", err)
	}
	return fromSQLiteTurns(rows)
}

func (s *sqliteStore) TurnsQueuedOwned(ctx context.Context, owner string, cutoff time.Time, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListQueuedOwned(ctx, s.dbtx, sqlitesqlc.TurnListQueuedOwnedParams{
		Owner: owner, Cutoff: sqliteTime(cutoff), AfterID: afterID, MaxRows: int64(batchLimit(limit))})
	if err != nil {
		return nil, sqliteErr("list queued turns of "+owner, err)
	}
	return fromSQLiteTurns(rows)
}

func (s *sqliteStore) TurnsRunningOwned(ctx context.Context, owner string, cutoff time.Time, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListRunningOwned(ctx, s.dbtx, sqlitesqlc.TurnListRunningOwnedParams{
		Owner: owner, Cutoff: sqliteBound(cutoff), AfterID: afterID, MaxRows: int64(batchLimit(limit))})
	if err != nil {
		return nil, sqliteErr("list running turns of "+owner, err)
	}
	return fromSQLiteTurns(rows)
}

func (s *sqliteStore) TurnsPendingInThread(ctx context.Context, threadKey string, beforeID int64, owner string, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListPendingInThread(ctx, s.dbtx, sqlitesqlc.TurnListPendingInThreadParams{
		ThreadKey: threadKey, BeforeID: beforeID, Owner: owner, MaxRows: int64(batchLimit(limit))})
	if err != nil {
		return nil, sqliteErr("list pending turns of "+threadKey, err)
	}
	return fromSQLiteTurns(rows)
}

func (s *sqliteStore) TurnClaim(ctx context.Context, id int64, from, to string, status TurnStatus) (Turn, error) {
	r, err := s.q.TurnClaim(ctx, s.dbtx, sqlitesqlc.TurnClaimParams{ID: id, FromOwner: from, ToOwner: to, Status: string(status)})
	if errors.Is(err, sql.ErrNoRows) {
		return Turn{}, claimFailed(id, from)
	}
	if err != nil {
		return Turn{}, sqliteErr("claim turn "+turnKey(id), err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnGetRunning(ctx context.Context, threadKey string) (Turn, error) {
	r, err := s.q.TurnGetRunning(ctx, s.dbtx, threadKey)
	if err != nil {
		return Turn{}, sqliteErr("get running turn of "+threadKey, err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnLastFailedWith(ctx context.Context, threadKey, errText string) (Turn, error) {
	r, err := s.q.TurnLastFailedWith(ctx, s.dbtx, sqlitesqlc.TurnLastFailedWithParams{ThreadKey: threadKey, Error: storableText(errText)})
	if err != nil {
		return Turn{}, sqliteErr("last failed turn of "+threadKey, err)
	}
	return fromSQLiteTurn(r)
}

func (s *sqliteStore) TurnAddUsage(ctx context.Context, id, inputTokens, outputTokens, costMicros int64) error {
	if err := checkUsageCall(inputTokens, outputTokens, costMicros); err != nil {
		return err
	}
	n, err := s.q.TurnAddUsage(ctx, s.dbtx, sqlitesqlc.TurnAddUsageParams{InputTokens: inputTokens, OutputTokens: outputTokens, CostMicros: costMicros, ID: id})
	if err != nil {
		return sqliteErr("add usage to turn "+turnKey(id), err)
	}
	if n == 0 {
		return fmt.Errorf("db: add usage to turn %s: %w", turnKey(id), ErrNotFound)
	}
	return nil
}

func (s *sqliteStore) TurnUsageTotals(ctx context.Context, threadKey, userID string, since time.Time) (UsageTotals, error) {
	r, err := s.q.TurnUsageTotals(ctx, s.dbtx, sqlitesqlc.TurnUsageTotalsParams{ThreadKey: threadKey, UserID: userID, Since: sqliteBound(since)})
	if err != nil {
		return UsageTotals{}, sqliteErr("usage totals", err)
	}
	return UsageTotals{
		Thread: r.ThreadTokens, ThreadToday: r.ThreadTodayTokens, User: r.UserTokens, All: r.AllTokens,
		ThreadCostMicros: r.ThreadCostMicros, UserCostMicros: r.UserCostMicros, AllCostMicros: r.AllCostMicros,
	}, nil
}

func (s *sqliteStore) TurnUsageTop(ctx context.Context, since time.Time, limit int) (UsageTop, error) {
	limit = min(max(limit, 1), MaxBatch)
	threads, err := s.q.TurnUsageTopThreads(ctx, s.dbtx, sqlitesqlc.TurnUsageTopThreadsParams{Since: sqliteBound(since), MaxRows: int64(limit)})
	if err != nil {
		return UsageTop{}, sqliteErr("usage by thread", err)
	}
	users, err := s.q.TurnUsageTopUsers(ctx, s.dbtx, sqlitesqlc.TurnUsageTopUsersParams{Since: sqliteBound(since), MaxRows: int64(limit)})
	if err != nil {
		return UsageTop{}, sqliteErr("usage by user", err)
	}
	var top UsageTop
	for _, r := range threads {
		top.Threads = append(top.Threads, UsageRank{Name: r.Name, Tokens: r.Tokens, CostMicros: r.CostMicros})
	}
	for _, r := range users {
		top.Users = append(top.Users, UsageRank{Name: r.Name, Tokens: r.Tokens, CostMicros: r.CostMicros})
	}
	return top, nil
}

func (s *sqliteStore) TurnMarkDelivered(ctx context.Context, id int64) error {
	if _, err := s.q.TurnMarkDelivered(ctx, s.dbtx, sqlitesqlc.TurnMarkDeliveredParams{Now: sqliteNullTime(s.now()), ID: id}); err != nil {
		return sqliteErr("mark turn "+turnKey(id)+" delivered", err)
	}
	return nil
}

func (s *sqliteStore) TurnsUndelivered(ctx context.Context, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListUndelivered(ctx, s.dbtx, sqlitesqlc.TurnListUndeliveredParams{AfterID: afterID, MaxRows: int64(batchLimit(limit))})
	if err != nil {
		return nil, sqliteErr("list undelivered turns", err)
	}
	return fromSQLiteTurns(rows)
}

func (s *sqliteStore) TurnClaimUndelivered(ctx context.Context, id int64, from, to string) (Turn, error) {
	r, err := s.q.TurnClaimUndelivered(ctx, s.dbtx, sqlitesqlc.TurnClaimUndeliveredParams{ID: id, FromOwner: from, ToOwner: to})
	if errors.Is(err, sql.ErrNoRows) {
		return Turn{}, claimFailed(id, from)
	}
	if err != nil {
		return Turn{}, sqliteErr("claim turn "+turnKey(id), err)
	}
	return fromSQLiteTurn(r)
}
