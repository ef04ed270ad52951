package db

import (
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/threadbox/threadbox/db/internal/pgsqlc"
)

// The converters below are the only place sqlc's Postgres row types meet ours.

func fromPGSession(r pgsqlc.Session) Session {
	return Session{
		ThreadKey:       r.ThreadKey,
		Platform:        r.Platform,
		ChannelID:       r.ChannelID,
		OwnerUserID:     r.OwnerUserID,
		Provider:        r.Provider,
		Handle:          rawJSON(r.Handle),
		SandboxID:       r.SandboxID,
		Generation:      r.Generation,
		Runtime:         r.Runtime,
		AgentSessionID:  r.AgentSessionID,
		Status:          SessionStatus(r.Status),
		ResumeFailCount: int(r.ResumeFailCount),
		LastError:       r.LastError,
		HandoffNote:     r.HandoffNote,
		ResetTurnID:     r.ResetTurnID,
		LastActivityAt:  fromPGTime(r.LastActivityAt),
		LastHealthOKAt:  fromPGTime(r.LastHealthOkAt),
		PausedAt:        fromPGTime(r.PausedAt),
		ResumedAt:       fromPGTime(r.ResumedAt),
		DestroyedAt:     fromPGTime(r.DestroyedAt),
		CreatedAt:       fromPGTime(r.CreatedAt),
		UpdatedAt:       fromPGTime(r.UpdatedAt),
	}
}

func fromPGSessions(rows []pgsqlc.Session) []Session {
	out := make([]Session, len(rows))
	for i, r := range rows {
		out[i] = fromPGSession(r)
	}
	return out
}

func fromPGTurn(r pgsqlc.Turn) Turn {
	return Turn{
		ID:              r.ID,
		ThreadKey:       r.ThreadKey,
		PlatformEventID: r.PlatformEventID,
		UserID:          r.UserID,
		Prompt:          r.Prompt,
		Status:          TurnStatus(r.Status),
		Answer:          r.Answer,
		Error:           r.Error,
		Usage:           rawJSON(r.Usage),
		Delivery:        rawJSON(r.Delivery),
		Owner:           r.Owner,
		DeliveredAt:     fromPGTime(r.DeliveredAt),
		CreatedAt:       fromPGTime(r.CreatedAt),
		StartedAt:       fromPGTime(r.StartedAt),
		LastEventAt:     fromPGTime(r.LastEventAt),
		FinishedAt:      fromPGTime(r.FinishedAt),
	}
}

func fromPGTurns(rows []pgsqlc.Turn) []Turn {
	out := make([]Turn, len(rows))
	for i, r := range rows {
		out[i] = fromPGTurn(r)
	}
	return out
}

func fromPGArtifact(r pgsqlc.Artifact) Artifact {
	return Artifact{
		ID:             r.ID,
		TurnID:         r.TurnID,
		ThreadKey:      r.ThreadKey,
		Path:           r.Path,
		SHA256:         r.Sha256,
		Size:           r.Size,
		UploadedAt:     fromPGTime(r.UploadedAt),
		PlatformFileID: r.PlatformFileID,
	}
}

func fromPGAudit(r pgsqlc.AuditLog) AuditEntry {
	return AuditEntry{
		ID: r.ID, At: fromPGTime(r.At), Actor: r.Actor, Action: r.Action, Target: r.Target, Result: r.Result,
	}
}

// rawJSON returns nil for SQL NULL (and for empty input) so callers can test Handle == nil.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func pgText(p *string) pgtype.Text {
	if p == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *p, Valid: true}
}

func pgInt8(p *int64) pgtype.Int8 {
	if p == nil {
		return pgtype.Int8{}
	}
	return pgtype.Int8{Int64: *p, Valid: true}
}

func pgTimePtr(p *time.Time) pgtype.Timestamptz {
	if p == nil {
		return pgtype.Timestamptz{}
	}
	return pgTime(*p)
}
