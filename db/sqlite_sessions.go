package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/threadbox/threadbox/db/internal/sqlitesqlc"
)

// sqliteIDChunk keeps SessionsBySandboxIDs under SQLite's limit on bound variables per statement.
const sqliteIDChunk = 500

func (s *sqliteStore) SessionGet(ctx context.Context, threadKey string) (Session, error) {
	r, err := s.q.SessionGetByThread(ctx, s.dbtx, threadKey)
	if err != nil {
		return Session{}, sqliteErr("get session "+threadKey, err)
	}
	return fromSQLiteSession(r)
}

func (s *sqliteStore) SessionCreate(ctx context.Context, ns NewSession) (Session, bool, error) {
	ns, err := ns.normalize()
	if err != nil {
		return Session{}, false, err
	}
	// Most calls find the session (every turn after a thread's first): read first, so that they
	// cost one query and no write.
	if sess, err := s.SessionGet(ctx, ns.ThreadKey); err == nil || !errors.Is(err, ErrNotFound) {
		return sess, false, err
	}
	r, err := s.q.SessionInsert(ctx, s.dbtx, sqlitesqlc.SessionInsertParams{
		ThreadKey:   ns.ThreadKey,
		Platform:    ns.Platform,
		ChannelID:   ns.ChannelID,
		OwnerUserID: ns.OwnerUserID,
		Provider:    ns.Provider,
		Runtime:     ns.Runtime,
		Status:      string(ns.Status),
		Now:         s.clock(),
	})
	switch {
	case err == nil:
		sess, err := fromSQLiteSession(r)
		return sess, err == nil, err
	case errors.Is(err, sql.ErrNoRows):
		// ON CONFLICT DO NOTHING returned no row: the session exists.
		sess, err := s.SessionGet(ctx, ns.ThreadKey)
		return sess, false, err
	default:
		return Session{}, false, sqliteErr("create session "+ns.ThreadKey, err)
	}
}

func (s *sqliteStore) SessionTransition(ctx context.Context, threadKey string, t Transition) (Session, error) {
	if err := t.check(); err != nil {
		return Session{}, err
	}
	t.Patch = t.Patch.clean()
	p := t.Patch
	r, err := s.q.SessionTransition(ctx, s.dbtx, sqlitesqlc.SessionTransitionParams{
		ToStatus:        string(t.To),
		Handle:          sqliteJSON(p.Handle),
		Provider:        sqliteText(p.Provider),
		Runtime:         sqliteText(p.Runtime),
		SandboxID:       sqliteText(p.SandboxID),
		BumpGeneration:  boolInt(t.BumpGeneration),
		Generation:      sqliteInt(p.Generation),
		AgentSessionID:  sqliteText(p.AgentSessionID),
		LastError:       sqliteText(p.LastError),
		HandoffNote:     sqliteText(p.HandoffNote),
		ResetTurnID:     sqliteInt(p.ResetTurnID),
		LastHealthOkAt:  sqliteTimePtr(p.LastHealthOKAt),
		ResumeFail:      t.ResumeFail.arg(),
		Now:             s.clock(),
		ThreadKey:       threadKey,
		FromStatuses:    t.fromStrings(),
		CheckGeneration: boolInt(t.IfGeneration != nil),
		IfGeneration:    t.ifGeneration(),
	})
	if errors.Is(err, sql.ErrNoRows) {
		cur, err := s.SessionGet(ctx, threadKey)
		if err != nil {
			return Session{}, err
		}
		return Session{}, t.conflict(threadKey, cur)
	}
	if err != nil {
		return Session{}, sqliteErr("transition session "+threadKey, err)
	}
	return fromSQLiteSession(r)
}

func (s *sqliteStore) SessionUpdate(ctx context.Context, threadKey string, p SessionPatch) (Session, error) {
	if err := p.check(); err != nil {
		return Session{}, err
	}
	p = p.clean()
	r, err := s.q.SessionUpdate(ctx, s.dbtx, sqlitesqlc.SessionUpdateParams{
		Handle:         sqliteJSON(p.Handle),
		Provider:       sqliteText(p.Provider),
		Runtime:        sqliteText(p.Runtime),
		SandboxID:      sqliteText(p.SandboxID),
		Generation:     sqliteInt(p.Generation),
		AgentSessionID: sqliteText(p.AgentSessionID),
		LastError:      sqliteText(p.LastError),
		HandoffNote:    sqliteText(p.HandoffNote),
		ResetTurnID:    sqliteInt(p.ResetTurnID),
		LastHealthOkAt: sqliteTimePtr(p.LastHealthOKAt),
		Now:            s.clock(),
		ThreadKey:      threadKey,
	})
	if err != nil {
		return Session{}, sqliteErr("update session "+threadKey, err)
	}
	return fromSQLiteSession(r)
}

func (s *sqliteStore) SessionTouch(ctx context.Context, threadKey string, handoffNote *string) error {
	n, err := s.q.SessionTouch(ctx, s.dbtx, sqlitesqlc.SessionTouchParams{Now: s.clock(), ThreadKey: threadKey, HandoffNote: sqliteText(storableTextPtr(handoffNote))})
	if err != nil {
		return sqliteErr("touch session "+threadKey, err)
	}
	if n == 0 {
		return fmt.Errorf("db: touch session %s: %w", threadKey, ErrNotFound)
	}
	return nil
}

func (s *sqliteStore) SessionsByStatus(ctx context.Context, status SessionStatus, after string, limit int) ([]Session, error) {
	if !status.Valid() {
		return nil, invalidf("unknown session status %q", status)
	}
	rows, err := s.q.SessionListByStatus(ctx, s.dbtx, sqlitesqlc.SessionListByStatusParams{
		Status: string(status), AfterThreadKey: after, MaxRows: int64(batchLimit(limit)),
	})
	if err != nil {
		return nil, sqliteErr("list sessions by status", err)
	}
	return fromSQLiteSessions(rows)
}

func (s *sqliteStore) SessionsLive(ctx context.Context, threadKey string, limit int) ([]string, error) {
	rows, err := s.q.SessionListLive(ctx, s.dbtx, sqlitesqlc.SessionListLiveParams{ThreadKey: threadKey, MaxRows: int64(batchLimit(limit))})
	if err != nil {
		return nil, sqliteErr("list live sessions", err)
	}
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = r.ThreadKey
	}
	return keys, nil
}

func (s *sqliteStore) SessionsIdle(ctx context.Context, cutoff time.Time, limit int) ([]Session, error) {
	rows, err := s.q.SessionListIdle(ctx, s.dbtx, sqlitesqlc.SessionListIdleParams{
		Cutoff: sqliteTime(cutoff), MaxRows: int64(batchLimit(limit)),
	})
	if err != nil {
		return nil, sqliteErr("list idle sessions", err)
	}
	return fromSQLiteSessions(rows)
}

func (s *sqliteStore) SessionsPausedExpired(ctx context.Context, cutoff time.Time, limit int) ([]Session, error) {
	rows, err := s.q.SessionListPausedExpired(ctx, s.dbtx, sqlitesqlc.SessionListPausedExpiredParams{
		Cutoff: sqliteBound(cutoff), MaxRows: int64(batchLimit(limit)),
	})
	if err != nil {
		return nil, sqliteErr("list expired paused sessions", err)
	}
	return fromSQLiteSessions(rows)
}

func (s *sqliteStore) SessionsBySandboxIDs(ctx context.Context, ids []string) ([]Session, error) {
	ids = nonEmpty(ids)
	var out []Session
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), sqliteIDChunk)]
		ids = ids[len(chunk):]
		rows, err := s.q.SessionListBySandboxIDs(ctx, s.dbtx, chunk)
		if err != nil {
			return nil, sqliteErr("list sessions by sandbox id", err)
		}
		sessions, err := fromSQLiteSessions(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sessions...)
	}
	// Each chunk is ordered; keep the whole result ordered like Postgres's.
	sortSessionsByKey(out)
	return out, nil
}

func sqliteTimePtr(p *time.Time) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sqliteNullTime(*p)
}

func (s *sqliteStore) SessionsUnsettled(ctx context.Context, cutoff time.Time, limit int) ([]Session, error) {
	rows, err := s.q.SessionListUnsettled(ctx, s.dbtx, sqlitesqlc.SessionListUnsettledParams{
		Cutoff: sqliteTime(cutoff), MaxRows: int64(batchLimit(limit)),
	})
	if err != nil {
		return nil, sqliteErr("list unsettled sessions", err)
	}
	return fromSQLiteSessions(rows)
}
