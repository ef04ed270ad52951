package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
)

// TurnInsert goes through the intake, which commits concurrent inserts together (pg_intake.go).
func (s *pgStore) TurnInsert(ctx context.Context, t NewTurn) (Turn, error) {
	if err := t.check(); err != nil {
		return Turn{}, err
	}
	t = t.clean()
	return s.intake.insert(ctx, t)
}

func (s *pgStore) TurnGet(ctx context.Context, id int64) (Turn, error) {
	r, err := s.q.TurnGet(ctx, s.dbtx, id)
	if err != nil {
		return Turn{}, pgErr("get turn "+turnKey(id), err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) TurnGetByEvent(ctx context.Context, eventID string) (Turn, error) {
	if !storableKey(eventID) {
		return Turn{}, noRow("get turn for event", eventID)
	}
	r, err := s.q.TurnGetByEvent(ctx, s.dbtx, eventID)
	if err != nil {
		return Turn{}, pgErr("get turn for event "+eventID, err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) TurnStart(ctx context.Context, id int64, owner string) (Turn, error) {
	r, err := s.q.TurnStart(ctx, s.dbtx, pgsqlc.TurnStartParams{Now: pgTime(s.clock()), ID: id, Owner: owner})
	if errors.Is(err, pgx.ErrNoRows) {
		return Turn{}, s.turnTransitionFailed(ctx, id, TurnRunning, TurnQueued)
	}
	if err != nil {
		return Turn{}, pgErr("start turn "+turnKey(id), err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) TurnStartFirst(ctx context.Context, id int64, owner string) (Turn, error) {
	r, err := s.q.TurnStartFirst(ctx, s.dbtx, pgsqlc.TurnStartFirstParams{Now: pgTime(s.clock()), ID: id, Owner: owner})
	if errors.Is(err, pgx.ErrNoRows) {
		return Turn{}, fmt.Errorf("db: start turn %s first: %w", turnKey(id), ErrConflict)
	}
	if err != nil {
		return Turn{}, pgErr("start turn "+turnKey(id), err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) TurnTouch(ctx context.Context, id int64) error {
	n, err := s.q.TurnTouch(ctx, s.relaxed, pgsqlc.TurnTouchParams{Now: pgTime(s.clock()), ID: id})
	if err != nil {
		return pgErr("touch turn "+turnKey(id), err)
	}
	if n == 0 {
		return s.turnTransitionFailed(ctx, id, TurnRunning, TurnRunning)
	}
	return nil
}

func (s *pgStore) TurnFinish(ctx context.Context, id int64, res TurnResult) (Turn, error) {
	if err := res.check(); err != nil {
		return Turn{}, err
	}
	res = res.clean()
	r, err := s.q.TurnFinish(ctx, s.dbtx, pgsqlc.TurnFinishParams{
		ToStatus: string(res.Status),
		Answer:   res.Answer,
		Error:    res.Error,
		Usage:    res.Usage,
		Now:      pgTime(s.clock()),
		ID:       id,
		Owner:    res.Owner,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		cur, err := s.TurnGet(ctx, id)
		if err != nil {
			return Turn{}, err
		}
		return Turn{}, turnFinishError(cur, res)
	}
	if err != nil {
		return Turn{}, pgErr("finish turn "+turnKey(id), err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) turnTransitionFailed(ctx context.Context, id int64, to TurnStatus, from ...TurnStatus) error {
	cur, err := s.TurnGet(ctx, id)
	if err != nil {
		return err
	}
	return turnTransitionError(id, cur.Status, to, from)
}

func (s *pgStore) TurnTranscript(ctx context.Context, threadKey string, l TranscriptLimit) ([]Turn, error) {
	if !storableKey(threadKey) {
		return nil, nil
	}
	l = l.withDefaults()
	rows, err := s.q.TurnListTranscript(ctx, s.dbtx, pgsqlc.TurnListTranscriptParams{
		ThreadKey: threadKey, MaxRows: int32(l.MaxTurns), AfterID: l.AfterID, MaxChars: int64(l.MaxChars), MaxTurnChars: int64(l.maxTurnChars()),
	})
	if err != nil {
		return nil, pgErr("transcript of "+threadKey, err)
	}
	// The query has applied the character cap already (see trimTranscript).
	return trimTranscript(fromPGTurns(rows), l.MaxChars), nil
}

func (s *pgStore) TurnsStuck(ctx context.Context, cutoff time.Time, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListStuck(ctx, s.dbtx, pgsqlc.TurnListStuckParams{
		Cutoff: pgTime(cutoff), MaxRows: int32(batchLimit(limit)),
	})
	if err != nil {
		return nil, pgErr("list stuck turns", err)
	}
	return fromPGTurns(rows), nil
}

func (s *pgStore) ArtifactRecord(ctx context.Context, a NewArtifact) (Artifact, error) {
	if err := a.check(); err != nil {
		return Artifact{}, err
	}
	a = a.clean()
	r, err := s.q.ArtifactInsert(ctx, s.dbtx, pgsqlc.ArtifactInsertParams{
		Path:           a.Path,
		Sha256:         a.SHA256,
		Size:           a.Size,
		Now:            pgTime(s.clock()),
		PlatformFileID: a.PlatformFileID,
		TurnID:         a.TurnID,
	})
	if err != nil {
		// No row means the turn does not exist.
		return Artifact{}, pgErr(fmt.Sprintf("record artifact %s of turn %d", a.Path, a.TurnID), err)
	}
	return fromPGArtifact(r), nil
}

func (s *pgStore) ArtifactLookup(ctx context.Context, threadKey, path, sha256 string) (Artifact, error) {
	// As ArtifactRecord stored them; a thread key that is not storable has no artifacts (and finds none).
	threadKey, path, sha256 = storableText(threadKey), storableText(path), storableText(sha256)
	r, err := s.q.ArtifactGetByPathSHA(ctx, s.dbtx, pgsqlc.ArtifactGetByPathSHAParams{
		ThreadKey: threadKey, Path: path, Sha256: sha256,
	})
	if err != nil {
		return Artifact{}, pgErr("look up artifact "+path, err)
	}
	return fromPGArtifact(r), nil
}

func (s *pgStore) AuditAppend(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	e, err := e.normalize()
	if err != nil {
		return AuditEntry{}, err
	}
	r, err := s.q.AuditInsert(ctx, s.dbtx, pgsqlc.AuditInsertParams{
		Now: pgTime(s.clock()), Actor: e.Actor, Action: e.Action, Target: e.Target, Result: e.Result,
	})
	if err != nil {
		return AuditEntry{}, pgErr("append audit entry", err)
	}
	return fromPGAudit(r), nil
}

func (s *pgStore) AuditList(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	rows, err := s.q.AuditList(ctx, s.dbtx, pgsqlc.AuditListParams{
		BeforeID: auditBefore(q.BeforeID), MaxRows: int32(batchLimit(q.Limit)),
	})
	if err != nil {
		return nil, pgErr("list audit log", err)
	}
	out := make([]AuditEntry, len(rows))
	for i, r := range rows {
		out[i] = fromPGAudit(r)
	}
	return out, nil
}

func (s *pgStore) TurnsPending(ctx context.Context, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListPending(ctx, s.dbtx, pgsqlc.TurnListPendingParams{AfterID: afterID, MaxRows: int32(batchLimit(limit))})
	if err != nil {
		return nil, pgErr("list pending turns", err)
	}
	return fromPGTurns(rows), nil
}

func (s *pgStore) TurnsQueuedOwned(ctx context.Context, owner string, cutoff time.Time, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListQueuedOwned(ctx, s.dbtx, pgsqlc.TurnListQueuedOwnedParams{
		Owner: owner, Cutoff: pgTime(cutoff), AfterID: afterID, MaxRows: int32(batchLimit(limit))})
	if err != nil {
		return nil, pgErr("list queued turns of "+owner, err)
	}
	return fromPGTurns(rows), nil
}

func (s *pgStore) TurnsRunningOwned(ctx context.Context, owner string, cutoff time.Time, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListRunningOwned(ctx, s.dbtx, pgsqlc.TurnListRunningOwnedParams{
		Owner: owner, Cutoff: pgTime(cutoff), AfterID: afterID, MaxRows: int32(batchLimit(limit))})
	if err != nil {
		return nil, pgErr("list running turns of "+owner, err)
	}
	return fromPGTurns(rows), nil
}

func (s *pgStore) TurnsPendingInThread(ctx context.Context, threadKey string, beforeID int64, owner string, limit int) ([]Turn, error) {
	if !storableKey(threadKey, owner) {
		return nil, nil
	}
	rows, err := s.q.TurnListPendingInThread(ctx, s.dbtx, pgsqlc.TurnListPendingInThreadParams{
		ThreadKey: threadKey, BeforeID: beforeID, Owner: owner, MaxRows: int32(batchLimit(limit))})
	if err != nil {
		return nil, pgErr("list pending turns of "+threadKey, err)
	}
	return fromPGTurns(rows), nil
}

func (s *pgStore) TurnClaim(ctx context.Context, id int64, from, to string, status TurnStatus) (Turn, error) {
	r, err := s.q.TurnClaim(ctx, s.dbtx, pgsqlc.TurnClaimParams{ID: id, FromOwner: from, ToOwner: to, Status: string(status)})
	if errors.Is(err, pgx.ErrNoRows) {
		return Turn{}, claimFailed(id, from)
	}
	if err != nil {
		return Turn{}, pgErr("claim turn "+turnKey(id), err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) TurnGetRunning(ctx context.Context, threadKey string) (Turn, error) {
	if !storableKey(threadKey) {
		return Turn{}, noRow("get running turn of", threadKey)
	}
	r, err := s.q.TurnGetRunning(ctx, s.dbtx, threadKey)
	if err != nil {
		return Turn{}, pgErr("get running turn of "+threadKey, err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) TurnLastFailedWith(ctx context.Context, threadKey, errText string) (Turn, error) {
	if !storableKey(threadKey) {
		return Turn{}, noRow("last failed turn of", threadKey)
	}
	r, err := s.q.TurnLastFailedWith(ctx, s.dbtx, pgsqlc.TurnLastFailedWithParams{ThreadKey: threadKey, Error: storableText(errText)})
	if err != nil {
		return Turn{}, pgErr("last failed turn of "+threadKey, err)
	}
	return fromPGTurn(r), nil
}

func (s *pgStore) TurnAddUsage(ctx context.Context, id, inputTokens, outputTokens, costMicros int64) error {
	if err := checkUsageCall(inputTokens, outputTokens, costMicros); err != nil {
		return err
	}
	n, err := s.q.TurnAddUsage(ctx, s.dbtx, pgsqlc.TurnAddUsageParams{InputTokens: inputTokens, OutputTokens: outputTokens, CostMicros: costMicros, ID: id})
	if err != nil {
		return pgErr("add usage to turn "+turnKey(id), err)
	}
	if n == 0 {
		return fmt.Errorf("db: add usage to turn %s: %w", turnKey(id), ErrNotFound)
	}
	return nil
}

func (s *pgStore) TurnUsageTotals(ctx context.Context, threadKey, userID string, since time.Time) (UsageTotals, error) {
	// A key that is not storable names no turn (storableKey); the query is asked about one that
	// is, and its sums for that scope are dropped.
	threadOK, userOK := storableKey(threadKey), storableKey(userID)
	r, err := s.q.TurnUsageTotals(ctx, s.dbtx, pgsqlc.TurnUsageTotalsParams{
		ThreadKey: storableText(threadKey), UserID: storableText(userID), Since: pgTime(since),
	})
	if err != nil {
		return UsageTotals{}, pgErr("usage totals", err)
	}
	t := UsageTotals{
		Thread: r.ThreadTokens, ThreadToday: r.ThreadTodayTokens, User: r.UserTokens, All: r.AllTokens,
		ThreadCostMicros: r.ThreadCostMicros, UserCostMicros: r.UserCostMicros, AllCostMicros: r.AllCostMicros,
	}
	if !threadOK {
		t.Thread, t.ThreadToday, t.ThreadCostMicros = 0, 0, 0
	}
	if !userOK {
		t.User, t.UserCostMicros = 0, 0
	}
	return t, nil
}

func (s *pgStore) TurnUsageTop(ctx context.Context, since time.Time, limit int) (UsageTop, error) {
	limit = min(max(limit, 1), MaxBatch)
	threads, err := s.q.TurnUsageTopThreads(ctx, s.dbtx, pgsqlc.TurnUsageTopThreadsParams{Since: pgTime(since), MaxRows: int32(limit)})
	if err != nil {
		return UsageTop{}, pgErr("usage by thread", err)
	}
	users, err := s.q.TurnUsageTopUsers(ctx, s.dbtx, pgsqlc.TurnUsageTopUsersParams{Since: pgTime(since), MaxRows: int32(limit)})
	if err != nil {
		return UsageTop{}, pgErr("usage by user", err)
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

func (s *pgStore) TurnMarkDelivered(ctx context.Context, id int64) error {
	if _, err := s.q.TurnMarkDelivered(ctx, s.dbtx, pgsqlc.TurnMarkDeliveredParams{Now: pgTime(s.clock()), ID: id}); err != nil {
		return pgErr("mark turn "+turnKey(id)+" delivered", err)
	}
	return nil
}

func (s *pgStore) TurnsUndelivered(ctx context.Context, afterID int64, limit int) ([]Turn, error) {
	rows, err := s.q.TurnListUndelivered(ctx, s.dbtx, pgsqlc.TurnListUndeliveredParams{AfterID: afterID, MaxRows: int32(batchLimit(limit))})
	if err != nil {
		return nil, pgErr("list undelivered turns", err)
	}
	return fromPGTurns(rows), nil
}

func (s *pgStore) TurnClaimUndelivered(ctx context.Context, id int64, from, to string) (Turn, error) {
	r, err := s.q.TurnClaimUndelivered(ctx, s.dbtx, pgsqlc.TurnClaimUndeliveredParams{ID: id, FromOwner: from, ToOwner: to})
	if errors.Is(err, pgx.ErrNoRows) {
		return Turn{}, claimFailed(id, from)
	}
	if err != nil {
		return Turn{}, pgErr("claim turn "+turnKey(id), err)
	}
	return fromPGTurn(r), nil
}
