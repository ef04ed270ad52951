package db

import (
	"context"
	"time"
)

// Batch sizes for the list and loop queries: a limit of zero or less means DefaultBatch, and a larger
// limit than MaxBatch is cut to MaxBatch so one loop iteration stays short.
const (
	DefaultBatch = 100
	MaxBatch     = 1000
)

// Store is the whole persistence surface: Postgres and SQLite implement it and pass dbtest.Run.
// Components that need less should depend on the smaller interfaces.
type Store interface {
	SessionStore
	TurnStore
	ArtifactStore
	AuditStore
	ThreadRepoStore
	CommandStore
	Locker

	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Migrate applies the embedded migrations that are not applied yet; running it again is a no-op.
	// Concurrent callers on Postgres are serialized by an advisory lock.
	// It refuses (ErrSchemaNewer) a database that a newer release migrated past this binary.
	Migrate(ctx context.Context) error
	// CheckSchema returns ErrSchemaNewer if a newer release migrated the database past this binary,
	// whose queries may then write rows the newer schema does not expect; it changes nothing else.
	// serve calls it when it does not migrate.
	CheckSchema(ctx context.Context) error
	// SchemaVersion is the newest applied migration's version (0 before the first Migrate).
	SchemaVersion(ctx context.Context) (int64, error)
	// Close releases any held locks and leadership, then closes the connections (and, on SQLite, the
	// process lock file).
	Close() error
}

// SessionStore reads and changes sessions.
type SessionStore interface {
	// SessionGet returns the thread's session, or ErrNotFound.
	SessionGet(ctx context.Context, threadKey string) (Session, error)
	// SessionCreate creates the thread's session if it has none. It returns the row either way, and
	// created reports whether this call made it.
	SessionCreate(ctx context.Context, s NewSession) (sess Session, created bool, err error)
	// SessionTransition changes the status by compare-and-set. If the status is not one of t.From it
	// changes nothing and returns a *TransitionError (errors.Is(err, ErrConflict)); ErrNotFound if the
	// thread has no session.
	SessionTransition(ctx context.Context, threadKey string, t Transition) (Session, error)
	// SessionUpdate applies a patch without touching the status.
	SessionUpdate(ctx context.Context, threadKey string, p SessionPatch) (Session, error)
	// SessionTouch records activity now (it never moves LastActivityAt backwards) and, if handoffNote
	// is not nil, the hand-off note of the turn that just ended. On PostgreSQL it does not wait for
	// the disk (a server crash may lose the last moment of them: pg_store.go, relaxedConns).
	SessionTouch(ctx context.Context, threadKey string, handoffNote *string) error

	// SessionsByStatus pages through sessions in one status, ordered by thread key, starting after
	// afterThreadKey ("" for the first page). For admin listings.
	SessionsByStatus(ctx context.Context, status SessionStatus, afterThreadKey string, limit int) ([]Session, error)
	// SessionsLive returns the thread keys of the sessions whose sandbox is live (creating, active,
	// resuming or pausing: what counts against sandbox.max_active), at most limit, threadKey's first
	// if it is live, so that a limit never hides it. One query: admission runs it for every turn.
	SessionsLive(ctx context.Context, threadKey string, limit int) ([]string, error)
	// SessionsIdle returns active sessions with no activity since before cutoff, oldest first.
	SessionsIdle(ctx context.Context, cutoff time.Time, limit int) ([]Session, error)
	// SessionsPausedExpired returns sessions paused since before cutoff, oldest first.
	SessionsPausedExpired(ctx context.Context, cutoff time.Time, limit int) ([]Session, error)
	// SessionsUnsettled returns sessions left between two stable states (creating, resuming, pausing,
	// destroying, or error) whose row has not changed since before cutoff, oldest change first: the
	// reconcile loop's candidates.
	SessionsUnsettled(ctx context.Context, cutoff time.Time, limit int) ([]Session, error)
	// SessionsBySandboxIDs returns the sessions whose SandboxID is one of ids, in any status, ordered by
	// thread key. The reaper passes one page of a provider's List at a time.
	SessionsBySandboxIDs(ctx context.Context, ids []string) ([]Session, error)
}

// TurnStore records turns.
type TurnStore interface {
	// TurnInsert records a queued turn. If a turn with the same PlatformEventID exists it returns
	// ErrDuplicate and creates nothing, also under concurrent inserts.
	TurnInsert(ctx context.Context, t NewTurn) (Turn, error)
	// TurnGet returns a turn by id, or ErrNotFound.
	TurnGet(ctx context.Context, id int64) (Turn, error)
	// TurnGetByEvent returns the turn recorded for a platform event id, or ErrNotFound.
	TurnGetByEvent(ctx context.Context, eventID string) (Turn, error)
	// TurnStart moves a queued turn owned by owner to running and sets StartedAt and LastEventAt. A
	// turn another owner claimed meanwhile is a conflict (errors.Is(err, ErrConflict)): it is not ours
	// to run.
	TurnStart(ctx context.Context, id int64, owner string) (Turn, error)
	// TurnStartFirst is TurnStart for a turn with no unfinished older turn of its thread owned by
	// another process: one statement where the check and the start were two, on every turn. It is a
	// conflict (ErrConflict, nothing changed) when such a turn exists, as well as when TurnStart's
	// would be: the caller then takes the slow path (answer the older turns, then TurnStart).
	TurnStartFirst(ctx context.Context, id int64, owner string) (Turn, error)
	// TurnTouch records that the runtime sent an event for a running turn (the watchdog's clock).
	TurnTouch(ctx context.Context, id int64) error
	// TurnFinish moves a queued or running turn to a final status.
	TurnFinish(ctx context.Context, id int64, r TurnResult) (Turn, error)
	// TurnTranscript returns the thread's newest finished turns, oldest first (newest last), within both
	// caps. A turn that would break the character cap ends the transcript: turns are never cut.
	TurnTranscript(ctx context.Context, threadKey string, limit TranscriptLimit) ([]Turn, error)
	// TurnsStuck returns running turns whose last runtime event is before cutoff, oldest first.
	TurnsStuck(ctx context.Context, cutoff time.Time, limit int) ([]Turn, error)
	// TurnsPending pages through queued and running turns in id order, starting after afterID.
	TurnsPending(ctx context.Context, afterID int64, limit int) ([]Turn, error)
	// TurnsQueuedOwned pages through owner's queued turns created at or before cutoff, in id order,
	// starting after afterID (the adoption pass: a replica's own orphans, filtered in the database).
	TurnsQueuedOwned(ctx context.Context, owner string, cutoff time.Time, afterID int64, limit int) ([]Turn, error)
	// TurnsRunningOwned pages through owner's running turns started at or before cutoff, in id order,
	// starting after afterID (the adoption pass: running turns its process may no longer hold).
	TurnsRunningOwned(ctx context.Context, owner string, cutoff time.Time, afterID int64, limit int) ([]Turn, error)
	// TurnsPendingInThread lists the thread's queued and running turns older than beforeID whose
	// owner is not owner, oldest first.
	TurnsPendingInThread(ctx context.Context, threadKey string, beforeID int64, owner string, limit int) ([]Turn, error)
	// TurnClaim makes to the owner of an unfinished turn if from still owns it and it is still in
	// status (queued or running: what the claimer saw); else ErrConflict.
	TurnClaim(ctx context.Context, id int64, from, to string, status TurnStatus) (Turn, error)
	// TurnMarkDelivered records that a finished turn's outcome was posted (idempotent).
	TurnMarkDelivered(ctx context.Context, id int64) error
	// TurnsUndelivered pages through finished turns never marked delivered, in id order.
	TurnsUndelivered(ctx context.Context, afterID int64, limit int) ([]Turn, error)
	// TurnClaimUndelivered makes to the owner of a finished, undelivered turn if from still owns it;
	// else ErrConflict.
	TurnClaimUndelivered(ctx context.Context, id int64, from, to string) (Turn, error)
	// TurnLastFailedWith returns the thread's newest failed turn whose error is exactly errText, or
	// ErrNotFound (retry finds the interrupted turn this way).
	TurnLastFailedWith(ctx context.Context, threadKey, errText string) (Turn, error)

	// TurnGetRunning returns the thread's running turn (the newest, should there be two), or
	// ErrNotFound.
	TurnGetRunning(ctx context.Context, threadKey string) (Turn, error)
	// TurnAddUsage adds tokens, and their cost in millionths of the price table's currency, to a
	// turn's usage ({"input_tokens","output_tokens","cost_micros"}; other keys are kept), atomically
	// and in any status; ErrNotFound if there is no such turn. A later TurnFinish keeps the sums:
	// its Usage only adds keys the turn does not have yet (the runtime's report comes from inside
	// the sandbox; the budgets sum these counts).
	// Each count must be in [0, MaxUsagePerCall], else ErrInvalid and nothing is added.
	TurnAddUsage(ctx context.Context, id, inputTokens, outputTokens, costMicros int64) error
	// TurnUsageTotals sums input plus output tokens, and cost: of the thread's turns (all of them, and
	// those started since since), of userID's turns started since since, and of every turn started
	// since since.
	TurnUsageTotals(ctx context.Context, threadKey, userID string, since time.Time) (UsageTotals, error)
	// TurnUsageTop ranks threads and users by the tokens of their turns started since since, up to
	// limit (at most MaxBatch) of each, most first.
	TurnUsageTop(ctx context.Context, since time.Time, limit int) (UsageTop, error)
}

// MaxKeyBytes is the longest key or name the stores take (thread keys, event ids, users, sandbox
// ids …; checkKeyText): PostgreSQL's btree entries hold at most 2704 bytes, and platforms' keys are
// far shorter.
const MaxKeyBytes = 1024

// MaxUsagePerCall bounds each count TurnAddUsage takes, and the counts in a finished turn's usage
// (2^40: a trillion tokens, or a million in cost), so that no sum of them can overflow a 64-bit
// integer on either engine in any realistic deployment.
const MaxUsagePerCall int64 = 1 << 40

// UsageTotals are token and cost sums for the model gateway's budgets and for showing usage. Costs
// are in millionths of the price table's currency (0 without a price table).
type UsageTotals struct {
	Thread      int64
	ThreadToday int64
	User        int64
	All         int64

	ThreadCostMicros int64
	UserCostMicros   int64
	AllCostMicros    int64
}

// UsageTop ranks who used the model most over a period.
type UsageTop struct {
	Threads []UsageRank
	Users   []UsageRank
}

// UsageRank is one thread's or user's use.
type UsageRank struct {
	Name       string
	Tokens     int64
	CostMicros int64
}

// ArtifactStore remembers uploaded files so a turn uploads only new or changed ones.
type ArtifactStore interface {
	// ArtifactRecord records an upload; ErrNotFound if the turn does not exist.
	ArtifactRecord(ctx context.Context, a NewArtifact) (Artifact, error)
	// ArtifactLookup returns the newest upload of path with this content in the thread, or ErrNotFound.
	ArtifactLookup(ctx context.Context, threadKey, path, sha256 string) (Artifact, error)
}

// AuditStore is the admin audit log.
type AuditStore interface {
	// AuditAppend records an entry; At is set by the store, and the text is escaped with
	// EscapeAuditText (control characters, NUL, invalid UTF-8).
	AuditAppend(ctx context.Context, e AuditEntry) (AuditEntry, error)
	// AuditList pages through entries, newest first.
	AuditList(ctx context.Context, q AuditQuery) ([]AuditEntry, error)
}

// Locker serializes work on a thread across processes and elects the loops' leader. See the package
// documentation for the semantics on each engine.
type Locker interface {
	// LockThread blocks until it holds the thread's lock or ctx ends. unlock is idempotent.
	LockThread(ctx context.Context, threadKey string) (unlock func(), err error)
	// TryLeader takes leadership if nobody holds it. ok is false, with a nil Leader, if another
	// process leads.
	TryLeader(ctx context.Context) (l Leader, ok bool, err error)
	// HoldThread is LockThread with notice of loss: the hold's Lost is closed when the lock ends
	// without Release (on Postgres, when the connection holding it dies: another process may then
	// take the thread, so the holder must stop its work).
	HoldThread(ctx context.Context, threadKey string) (Hold, error)
	// HoldInstance marks a process instance as alive for as long as the hold lasts. Turns are owned
	// by instances; another process claims a turn only when its owner is not alive.
	HoldInstance(ctx context.Context, instance string) (Hold, error)
	// InstanceAlive reports whether instance holds its liveness lock. The empty instance is never
	// alive.
	InstanceAlive(ctx context.Context, instance string) (bool, error)
}

// Hold is a held lock that can be lost.
type Hold interface {
	// Lost is closed when the hold ends: on Release, on Store.Close, or when it is lost.
	Lost() <-chan struct{}
	// Context is cancelled when Lost closes, so a holder can tie work to the hold with
	// context.AfterFunc instead of a goroutine per hold.
	Context() context.Context
	// Release gives the lock up. It is idempotent.
	Release()
}

// Leader is held leadership.
type Leader interface {
	// Lost is closed when leadership ends: on Release, on Store.Close, or when the connection that
	// holds the lock dies (then another process may already lead: stop the loops).
	Lost() <-chan struct{}
	// Release gives leadership up. It is idempotent.
	Release()
}
