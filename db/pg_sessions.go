package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
)

func (s *pgStore) SessionGet(ctx context.Context, threadKey string) (Session, error) {
	if !storableKey(threadKey) {
		return Session{}, noRow("get session", threadKey)
	}
	r, err := s.q.SessionGetByThread(ctx, s.dbtx, threadKey)
	if err != nil {
		return Session{}, pgErr("get session "+threadKey, err)
	}
	return fromPGSession(r), nil
}

func (s *pgStore) SessionCreate(ctx context.Context, ns NewSession) (Session, bool, error) {
	ns, err := ns.normalize()
	if err != nil {
		return Session{}, false, err
	}
	// Most calls find the session (every turn after a thread's first): read first, so that they
	// cost one query and no write.
	if sess, err := s.SessionGet(ctx, ns.ThreadKey); err == nil || !errors.Is(err, ErrNotFound) {
		return sess, false, err
	}
	r, err := s.q.SessionInsert(ctx, s.dbtx, pgsqlc.SessionInsertParams{
		ThreadKey:   ns.ThreadKey,
		Platform:    ns.Platform,
		ChannelID:   ns.ChannelID,
		OwnerUserID: ns.OwnerUserID,
		Provider:    ns.Provider,
		Runtime:     ns.Runtime,
		Status:      string(ns.Status),
		Now:         pgTime(s.clock()),
	})
	switch {
	case err == nil:
		return fromPGSession(r), true, nil
	case errors.Is(err, pgx.ErrNoRows):
		// ON CONFLICT DO NOTHING returned no row: the session exists (possibly created concurrently;
		// READ COMMITTED lets this read see it).
		sess, err := s.SessionGet(ctx, ns.ThreadKey)
		return sess, false, err
	default:
		return Session{}, false, pgErr("create session "+ns.ThreadKey, err)
	}
}

func (s *pgStore) SessionTransition(ctx context.Context, threadKey string, t Transition) (Session, error) {
	if !storableKey(threadKey) {
		return Session{}, noRow("change session", threadKey)
	}
	if err := t.check(); err != nil {
		return Session{}, err
	}
	t.Patch = t.Patch.clean()
	p := t.Patch
	r, err := s.q.SessionTransition(ctx, s.dbtx, pgsqlc.SessionTransitionParams{
		ToStatus:        string(t.To),
		Handle:          p.Handle,
		Provider:        pgText(p.Provider),
		Runtime:         pgText(p.Runtime),
		SandboxID:       pgText(p.SandboxID),
		BumpGeneration:  t.BumpGeneration,
		Generation:      pgInt8(p.Generation),
		AgentSessionID:  pgText(p.AgentSessionID),
		LastError:       pgText(p.LastError),
		HandoffNote:     pgText(p.HandoffNote),
		ResetTurnID:     pgInt8(p.ResetTurnID),
		LastHealthOkAt:  pgTimePtr(p.LastHealthOKAt),
		ResumeFail:      t.ResumeFail.arg(),
		Now:             pgTime(s.clock()),
		ThreadKey:       threadKey,
		FromStatuses:    t.fromStrings(),
		CheckGeneration: t.IfGeneration != nil,
		IfGeneration:    t.ifGeneration(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, s.transitionFailed(ctx, threadKey, t)
	}
	if err != nil {
		return Session{}, pgErr("transition session "+threadKey, err)
	}
	return fromPGSession(r), nil
}

// transitionFailed tells a missing row from a row in another state, after the update matched nothing.
func (s *pgStore) transitionFailed(ctx context.Context, threadKey string, t Transition) error {
	cur, err := s.SessionGet(ctx, threadKey)
	if err != nil {
		return err
	}
	return t.conflict(threadKey, cur)
}

func (s *pgStore) SessionUpdate(ctx context.Context, threadKey string, p SessionPatch) (Session, error) {
	if !storableKey(threadKey) {
		return Session{}, noRow("update session", threadKey)
	}
	if err := p.check(); err != nil {
		return Session{}, err
	}
	p = p.clean()
	r, err := s.q.SessionUpdate(ctx, s.dbtx, pgsqlc.SessionUpdateParams{
		Handle:         p.Handle,
		Provider:       pgText(p.Provider),
		Runtime:        pgText(p.Runtime),
		SandboxID:      pgText(p.SandboxID),
		Generation:     pgInt8(p.Generation),
		AgentSessionID: pgText(p.AgentSessionID),
		LastError:      pgText(p.LastError),
		HandoffNote:    pgText(p.HandoffNote),
		ResetTurnID:    pgInt8(p.ResetTurnID),
		LastHealthOkAt: pgTimePtr(p.LastHealthOKAt),
		Now:            pgTime(s.clock()),
		ThreadKey:      threadKey,
	})
	if err != nil {
		return Session{}, pgErr("update session "+threadKey, err)
	}
	return fromPGSession(r), nil
}

func (s *pgStore) SessionTouch(ctx context.Context, threadKey string, handoffNote *string) error {
	if !storableKey(threadKey) {
		return noRow("touch session", threadKey)
	}
	n, err := s.q.SessionTouch(ctx, s.relaxed, pgsqlc.SessionTouchParams{Now: pgTime(s.clock()), ThreadKey: threadKey, HandoffNote: pgText(storableTextPtr(handoffNote))})
	if err != nil {
		return pgErr("touch session "+threadKey, err)
	}
	if n == 0 {
		return fmt.Errorf("db: touch session %s: %w", threadKey, ErrNotFound)
	}
	return nil
}

func (s *pgStore) SessionsByStatus(ctx context.Context, status SessionStatus, after string, limit int) ([]Session, error) {
	if !status.Valid() {
		return nil, invalidf("unknown session status %q", status)
	}
	rows, err := s.q.SessionListByStatus(ctx, s.dbtx, pgsqlc.SessionListByStatusParams{
		Status: string(status), AfterThreadKey: after, MaxRows: int32(batchLimit(limit)),
	})
	if err != nil {
		return nil, pgErr("list sessions by status", err)
	}
	return fromPGSessions(rows), nil
}

func (s *pgStore) SessionsLive(ctx context.Context, threadKey string, limit int) ([]string, error) {
	if !storableKey(threadKey) {
		threadKey = "" // no session to put first
	}
	keys, err := s.q.SessionListLive(ctx, s.dbtx, pgsqlc.SessionListLiveParams{ThreadKey: threadKey, MaxRows: int32(batchLimit(limit))})
	if err != nil {
		return nil, pgErr("list live sessions", err)
	}
	return keys, nil
}

func (s *pgStore) SessionsIdle(ctx context.Context, cutoff time.Time, limit int) ([]Session, error) {
	rows, err := s.q.SessionListIdle(ctx, s.dbtx, pgsqlc.SessionListIdleParams{
		Cutoff: pgTime(cutoff), MaxRows: int32(batchLimit(limit)),
	})
	if err != nil {
		return nil, pgErr("list idle sessions", err)
	}
	return fromPGSessions(rows), nil
}

func (s *pgStore) SessionsPausedExpired(ctx context.Context, cutoff time.Time, limit int) ([]Session, error) {
	rows, err := s.q.SessionListPausedExpired(ctx, s.dbtx, pgsqlc.SessionListPausedExpiredParams{
		Cutoff: pgTime(cutoff), MaxRows: int32(batchLimit(limit)),
	})
	if err != nil {
		return nil, pgErr("list expired paused sessions", err)
	}
	return fromPGSessions(rows), nil
}

func (s *pgStore) SessionsBySandboxIDs(ctx context.Context, ids []string) ([]Session, error) {
	ids = nonEmpty(ids)
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.q.SessionListBySandboxIDs(ctx, s.dbtx, ids)
	if err != nil {
		return nil, pgErr("list sessions by sandbox id", err)
	}
	return fromPGSessions(rows), nil
}

func (s *pgStore) SessionsUnsettled(ctx context.Context, cutoff time.Time, limit int) ([]Session, error) {
	rows, err := s.q.SessionListUnsettled(ctx, s.dbtx, pgsqlc.SessionListUnsettledParams{
		Cutoff: pgTime(cutoff), MaxRows: int32(batchLimit(limit)),
	})
	if err != nil {
		return nil, pgErr("list unsettled sessions", err)
	}
	return fromPGSessions(rows), nil
}
