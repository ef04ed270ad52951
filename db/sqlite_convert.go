package db

import (
	"database/sql"
	"encoding/json"

	"github.com/threadbox/threadbox/db/internal/sqlitesqlc"
)

// The converters below are the only place sqlc's SQLite row types meet ours. Times are parsed from
// the store's fixed layout; a value that does not parse is reported, never silently zeroed.

func fromSQLiteSession(r sqlitesqlc.Session) (Session, error) {
	var p sqliteTimes
	s := Session{
		ThreadKey:       r.ThreadKey,
		Platform:        r.Platform,
		ChannelID:       r.ChannelID,
		OwnerUserID:     r.OwnerUserID,
		Provider:        r.Provider,
		Handle:          nullJSON(r.Handle),
		SandboxID:       r.SandboxID,
		Generation:      r.Generation,
		Runtime:         r.Runtime,
		AgentSessionID:  r.AgentSessionID,
		Status:          SessionStatus(r.Status),
		ResumeFailCount: int(r.ResumeFailCount),
		LastError:       r.LastError,
		HandoffNote:     r.HandoffNote,
		ResetTurnID:     r.ResetTurnID,
		LastActivityAt:  p.parse("sessions.last_activity_at", r.LastActivityAt),
		LastHealthOKAt:  p.null("sessions.last_health_ok_at", r.LastHealthOkAt),
		PausedAt:        p.null("sessions.paused_at", r.PausedAt),
		ResumedAt:       p.null("sessions.resumed_at", r.ResumedAt),
		DestroyedAt:     p.null("sessions.destroyed_at", r.DestroyedAt),
		CreatedAt:       p.parse("sessions.created_at", r.CreatedAt),
		UpdatedAt:       p.parse("sessions.updated_at", r.UpdatedAt),
	}
	return s, p.err
}

func fromSQLiteSessions(rows []sqlitesqlc.Session) ([]Session, error) {
	out := make([]Session, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = fromSQLiteSession(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func fromSQLiteTurn(r sqlitesqlc.Turn) (Turn, error) {
	var p sqliteTimes
	t := Turn{
		ID:              r.ID,
		ThreadKey:       r.ThreadKey,
		PlatformEventID: r.PlatformEventID,
		UserID:          r.UserID,
		Prompt:          r.Prompt,
		Status:          TurnStatus(r.Status),
		Answer:          r.Answer,
		Error:           r.Error,
		Usage:           nullJSON(r.Usage),
		Delivery:        nullJSON(r.Delivery),
		Owner:           r.Owner,
		DeliveredAt:     p.null("turns.delivered_at", r.DeliveredAt),
		CreatedAt:       p.parse("turns.created_at", r.CreatedAt),
		StartedAt:       p.null("turns.started_at", r.StartedAt),
		LastEventAt:     p.null("turns.last_event_at", r.LastEventAt),
		FinishedAt:      p.null("turns.finished_at", r.FinishedAt),
	}
	return t, p.err
}

func fromSQLiteTurns(rows []sqlitesqlc.Turn) ([]Turn, error) {
	out := make([]Turn, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = fromSQLiteTurn(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func fromSQLiteArtifact(r sqlitesqlc.Artifact) (Artifact, error) {
	var p sqliteTimes
	a := Artifact{
		ID:             r.ID,
		TurnID:         r.TurnID,
		ThreadKey:      r.ThreadKey,
		Path:           r.Path,
		SHA256:         r.Sha256,
		Size:           r.Size,
		UploadedAt:     p.parse("artifacts.uploaded_at", r.UploadedAt),
		PlatformFileID: r.PlatformFileID,
	}
	return a, p.err
}

func fromSQLiteAudit(r sqlitesqlc.AuditLog) (AuditEntry, error) {
	var p sqliteTimes
	e := AuditEntry{
		ID: r.ID, At: p.parse("audit_log.at", r.At), Actor: r.Actor, Action: r.Action, Target: r.Target, Result: r.Result,
	}
	return e, p.err
}

func nullJSON(s sql.NullString) json.RawMessage {
	if !s.Valid || s.String == "" {
		return nil
	}
	return json.RawMessage(s.String)
}

func sqliteJSON(b json.RawMessage) sql.NullString {
	if b == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

func sqliteText(p *string) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *p, Valid: true}
}

func sqliteInt(p *int64) sql.NullInt64 {
	if p == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: *p, Valid: true}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
