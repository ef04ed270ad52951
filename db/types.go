package db

import (
	"encoding/json"
	"time"
)

// SessionStatus is where a thread's session is in its lifecycle (DESIGN §6).
type SessionStatus string

// The session statuses. The store does not enforce a transition graph: callers name the states they
// expect (Transition.From) and the store only guarantees the compare-and-set.
const (
	SessionCreating   SessionStatus = "creating"
	SessionActive     SessionStatus = "active"
	SessionPausing    SessionStatus = "pausing"
	SessionPaused     SessionStatus = "paused"
	SessionResuming   SessionStatus = "resuming"
	SessionDestroying SessionStatus = "destroying"
	SessionDestroyed  SessionStatus = "destroyed"
	SessionError      SessionStatus = "error"
)

// Valid reports whether s is one of the known session statuses.
func (s SessionStatus) Valid() bool {
	switch s {
	case SessionCreating, SessionActive, SessionPausing, SessionPaused,
		SessionResuming, SessionDestroying, SessionDestroyed, SessionError:
		return true
	}
	return false
}

// TurnStatus is where a turn is: queued → running → done | failed | cancelled.
type TurnStatus string

// The turn statuses.
const (
	TurnQueued    TurnStatus = "queued"
	TurnRunning   TurnStatus = "running"
	TurnDone      TurnStatus = "done"
	TurnFailed    TurnStatus = "failed"
	TurnCancelled TurnStatus = "cancelled"
)

// Valid reports whether s is one of the known turn statuses.
func (s TurnStatus) Valid() bool {
	return s == TurnQueued || s == TurnRunning || s.Finished()
}

// Finished reports whether s is a final status.
func (s TurnStatus) Finished() bool {
	return s == TurnDone || s == TurnFailed || s == TurnCancelled
}

// Session is one thread's row: its sandbox, runtime and lifecycle state. Times are UTC; a zero time
// means "never" (the column is NULL).
type Session struct {
	ThreadKey   string
	Platform    string
	ChannelID   string
	OwnerUserID string

	Provider string
	// Handle is the provider's saveable handle. The store keeps it as opaque JSON: the sandbox package
	// owns its shape, and db must not import sandbox. It is nil when no sandbox was ever created.
	// Postgres keeps it as jsonb, so the bytes read back may differ from those written in spacing
	// and key order: decode it, never compare bytes.
	Handle json.RawMessage
	// SandboxID repeats the handle's id in an indexed column, for the reaper.
	SandboxID  string
	Generation int64

	Runtime        string
	AgentSessionID string

	Status          SessionStatus
	ResumeFailCount int
	LastError       string
	HandoffNote     string
	// ResetTurnID is the newest turn when the thread was last reset; replays start after it.
	ResetTurnID int64

	LastActivityAt time.Time
	LastHealthOKAt time.Time
	PausedAt       time.Time
	ResumedAt      time.Time
	DestroyedAt    time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// NewSession is what SessionCreate needs to create a row.
type NewSession struct {
	ThreadKey   string
	Platform    string
	ChannelID   string
	OwnerUserID string
	Provider    string
	Runtime     string
	// Status defaults to SessionCreating.
	Status SessionStatus
}

// SessionPatch lists optional changes to a session. A nil field leaves the column as it is; a pointer
// to the zero value clears it (for example LastError: ptr("")).
type SessionPatch struct {
	Handle json.RawMessage
	// Provider is the sandbox provider the thread's next sandbox is created on (a thread's choice,
	// or the one its sandbox was created on).
	Provider *string
	// Runtime is the agent runtime the thread's sandboxes run (a thread's choice among the enabled).
	Runtime        *string
	SandboxID      *string
	Generation     *int64
	AgentSessionID *string
	LastError      *string
	HandoffNote    *string
	ResetTurnID    *int64
	LastHealthOKAt *time.Time
}

// ResumeFailOp says what a transition does to Session.ResumeFailCount.
type ResumeFailOp int

// The ResumeFailOp values.
const (
	ResumeFailKeep ResumeFailOp = iota
	ResumeFailIncrement
	ResumeFailReset
)

// Transition is a compare-and-set on a session's status: it applies only if the status is one of From,
// and then sets To, the patch, and the timestamps that To implies:
//   - paused: PausedAt;
//   - active: LastActivityAt, and ResumedAt when the old status was resuming;
//   - destroyed: DestroyedAt;
//   - always UpdatedAt.
type Transition struct {
	From []SessionStatus
	To   SessionStatus
	// Patch is applied in the same statement as the status change.
	Patch SessionPatch
	// BumpGeneration adds one to Generation, atomically; it excludes Patch.Generation.
	BumpGeneration bool
	ResumeFail     ResumeFailOp
	// IfGeneration, when set, fences the transition to one sandbox generation: it applies only if the
	// row's generation (before any bump) is *IfGeneration, and otherwise fails as a conflict like a
	// wrong status. A writer that acts on a sandbox names the generation it acted on, so a stale turn
	// or loop cannot pause, destroy or record over a newer sandbox of the same thread.
	IfGeneration *int64
}

// Turn is one prompt and its answer. Turns are also the transcript replayed into a new agent session.
type Turn struct {
	ID              int64
	ThreadKey       string
	PlatformEventID string
	UserID          string
	Prompt          string
	Status          TurnStatus
	Answer          string
	Error           string
	// Usage is the runtime's token accounting, opaque JSON; nil if none was reported.
	Usage json.RawMessage
	// Delivery says where the reply goes (opaque JSON the bot encodes), so that any process can answer
	// the turn; nil for turns recorded without one.
	Delivery json.RawMessage
	// Owner is the process instance that runs or will run the turn (see Locker.HoldInstance).
	Owner string
	// DeliveredAt is when the outcome was posted; zero for a turn not finished, or finished and not
	// yet posted.
	DeliveredAt time.Time

	CreatedAt   time.Time
	StartedAt   time.Time
	LastEventAt time.Time
	FinishedAt  time.Time
}

// NewTurn is what TurnInsert needs. PlatformEventID is the dedupe key: Slack's event_id, Discord's
// message id, or one the web chat makes up.
type NewTurn struct {
	ThreadKey       string
	PlatformEventID string
	UserID          string
	Prompt          string
	// Delivery is where the reply goes (opaque, valid JSON or nil).
	Delivery json.RawMessage
	// Owner is the inserting process's instance id.
	Owner string
}

// TurnResult finishes a turn.
type TurnResult struct {
	// Status is TurnDone, TurnFailed or TurnCancelled.
	Status TurnStatus
	Answer string
	Error  string
	// Usage is a JSON object (or nil/null: none reported), else ErrInvalid. Its counts
	// (input_tokens, output_tokens, cost_micros) that are not whole numbers in [0, MaxUsagePerCall]
	// are dropped (cleanUsageJSON).
	Usage json.RawMessage
	// Owner, if set, fences the finish to the process that holds the turn: a turn another process
	// has claimed meanwhile (this one was thought dead) is left to it, with ErrNotOwner.
	Owner string
}

// TranscriptLimit caps a transcript. Both caps apply; zero means the default.
type TranscriptLimit struct {
	// MaxTurns is the most turns returned (default 20).
	MaxTurns int
	// MaxChars caps the sum of the prompts' and answers' lengths in characters (runes), default 12,000.
	MaxChars int
	// AfterID, when set, leaves out turns with this id or an older one (a thread's reset point).
	AfterID int64
}

// Artifact is a file a turn uploaded to the chat platform.
type Artifact struct {
	ID             int64
	TurnID         int64
	ThreadKey      string
	Path           string
	SHA256         string
	Size           int64
	UploadedAt     time.Time
	PlatformFileID string
}

// NewArtifact is what ArtifactRecord needs; the thread key is taken from the turn.
type NewArtifact struct {
	TurnID         int64
	Path           string
	SHA256         string
	Size           int64
	PlatformFileID string
}

// AuditEntry is one admin action: who did what to which target, with what result, when.
type AuditEntry struct {
	ID     int64
	At     time.Time
	Actor  string
	Action string
	Target string
	Result string
}

// AuditQuery pages through the audit log, newest first.
type AuditQuery struct {
	// BeforeID returns entries older than this id; zero starts at the newest.
	BeforeID int64
	// Limit defaults to DefaultBatch and is capped at MaxBatch.
	Limit int
}
