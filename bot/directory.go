package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// The directory is the adapters' read-only window on sessions and turns. Adapters may import only bot
// (DESIGN §2), so they see these views, not db's rows; bot maps one to the other here, in one place.

// SessionStatus is a session's lifecycle state as the adapters see it; the values are db's.
type SessionStatus string

// Valid reports whether s is one of the known session statuses.
func (s SessionStatus) Valid() bool { return db.SessionStatus(s).Valid() }

// TurnStatus is a turn's state as the adapters see it; the values are db's.
type TurnStatus string

// The turn statuses.
const (
	TurnQueued    = TurnStatus(db.TurnQueued)
	TurnRunning   = TurnStatus(db.TurnRunning)
	TurnDone      = TurnStatus(db.TurnDone)
	TurnFailed    = TurnStatus(db.TurnFailed)
	TurnCancelled = TurnStatus(db.TurnCancelled)
)

// SessionView is a thread's session as the adapters show it. Times are UTC; a zero time means never.
type SessionView struct {
	ThreadKey       string
	Platform        string
	Status          SessionStatus
	Provider        string
	SandboxID       string
	Generation      int64
	Runtime         string
	ResumeFailCount int
	LastError       string

	// Repo is the thread's repository (host/owner/name; "" for none recorded), BaseBranch the branch
	// it started from ("" for the default), WorkBranch its own branch, and PushedCommit where that was
	// last pushed ("" before the first push).
	Repo, BaseBranch, WorkBranch, PushedCommit string
	PushedAt                                   time.Time

	LastActivityAt time.Time
	PausedAt       time.Time
	ResumedAt      time.Time
	DestroyedAt    time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

func sessionView(s db.Session) SessionView {
	return SessionView{
		ThreadKey: s.ThreadKey, Platform: s.Platform, Status: SessionStatus(s.Status), Provider: s.Provider,
		SandboxID: s.SandboxID, Generation: s.Generation, Runtime: s.Runtime, ResumeFailCount: s.ResumeFailCount,
		LastError: s.LastError, LastActivityAt: s.LastActivityAt, PausedAt: s.PausedAt, ResumedAt: s.ResumedAt,
		DestroyedAt: s.DestroyedAt, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

// TurnView is one finished turn of a thread's history: the prompt and what came of it.
type TurnView struct {
	// EventID is the platform's id of the message that asked (the turn's dedupe key).
	EventID    string
	UserID     string
	Prompt     string
	Status     TurnStatus
	Answer     string
	Error      string
	CreatedAt  time.Time
	FinishedAt time.Time
}

// ExplainFailure is what to tell a user of the failed turn t: its recorded Error is the failure's own
// text (the runtime's, the provider's, the database's), so, as when recovery posts a recorded failure
// again, it is told as an internal error (or an interruption), and logged in full under the ref.
func (t TurnView) ExplainFailure(log *zap.Logger, fields ...zap.Field) Problem {
	var err error = &agentpool.Error{Code: agentpool.EINTERNAL, Op: "recorded failure", Err: errors.New(t.Error)}
	if t.Error == agentpool.InterruptedText {
		err = agentpool.ErrInterrupted
	}
	return Explain(log, "a failed turn shown again", err, append(fields, zap.String("event", t.EventID))...)
}

// DirectoryStore is what the directory reads; db.Store implements it.
type DirectoryStore interface {
	SessionGet(ctx context.Context, threadKey string) (db.Session, error)
	SessionsByStatus(ctx context.Context, status db.SessionStatus, afterThreadKey string, limit int) ([]db.Session, error)
	TurnTranscript(ctx context.Context, threadKey string, limit db.TranscriptLimit) ([]db.Turn, error)
	ThreadReposByKeys(ctx context.Context, threadKeys []string) ([]db.ThreadRepo, error)
}

// Sessions answers whether a thread has a session: Slack counts a follow-up without a mention only
// in a thread the bot already serves. *Directory implements it.
type Sessions interface {
	HasSession(ctx context.Context, thread ThreadKey) (bool, error)
}

var _ Sessions = (*Directory)(nil)

// Directory reads sessions and thread histories for the adapters (conversation lists, history, the
// operations view, follow-ups).
type Directory struct {
	store DirectoryStore
	// redact, when set, takes secrets out of each session's last error (see WithRedaction).
	redact func(string) string
}

// NewDirectory builds a directory over the store.
func NewDirectory(store DirectoryStore) *Directory { return &Directory{store: store} }

// WithRedaction makes every session's last error pass through redact, the log's own redaction, and
// returns d. The last error is the provider's own words (a URL with credentials, a key), and the
// directory's views leave the process: the web operations view and conversation API show them, as
// admin inspect does (Admin.WithRedaction).
func (d *Directory) WithRedaction(redact func(string) string) *Directory {
	d.redact = redact
	return d
}

// Session returns the thread's session; found is false if it has none.
func (d *Directory) Session(ctx context.Context, thread ThreadKey) (s SessionView, found bool, err error) {
	got, err := d.store.SessionGet(ctx, thread.String())
	switch {
	case errors.Is(err, db.ErrNotFound):
		return SessionView{}, false, nil
	case err != nil:
		return SessionView{}, false, err
	}
	return d.view(got), true, nil
}

// HasSession reports whether the thread has a session, in any status.
func (d *Directory) HasSession(ctx context.Context, thread ThreadKey) (bool, error) {
	_, found, err := d.Session(ctx, thread)
	return found, err
}

// ErrUnknownStatus is returned for a session status filter that names no status.
var ErrUnknownStatus = errors.New("unknown status")

// Sessions lists sessions the way "admin sessions" does (chat, CLI and web show the same rows): in
// one status, or in every status when status is "", up to SessionsListMax. truncated reports that
// the cap was reached.
func (d *Directory) Sessions(ctx context.Context, status SessionStatus) (list []SessionView, truncated bool, err error) {
	statuses, err := statusFilter(status)
	if err != nil {
		return nil, false, err
	}
	all, err := ListSessions(ctx, d.store, statuses, SessionsListMax)
	if err != nil {
		return nil, false, err
	}
	list, err = d.withRepos(ctx, d.views(all))
	return list, len(all) >= SessionsListMax, err
}

// withRepos adds each thread's repository, in one query for the whole list.
func (d *Directory) withRepos(ctx context.Context, list []SessionView) ([]SessionView, error) {
	keys := make([]string, len(list))
	for i, s := range list {
		keys[i] = s.ThreadKey
	}
	repos, err := d.store.ThreadReposByKeys(ctx, keys)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]db.ThreadRepo, len(repos))
	for _, r := range repos {
		byKey[r.ThreadKey] = r
	}
	for i := range list {
		if r, ok := byKey[list[i].ThreadKey]; ok {
			list[i].Repo, list[i].BaseBranch, list[i].WorkBranch = r.Repo, r.BaseBranch, r.WorkBranch
			list[i].PushedCommit, list[i].PushedAt = r.PushedCommit, r.PushedAt
		}
	}
	return list, nil
}

// statusFilter is the statuses a listing filtered by status covers: all of them for "".
func statusFilter(status SessionStatus) ([]db.SessionStatus, error) {
	switch {
	case status == "":
		return SessionStatuses, nil
	case !status.Valid():
		return nil, &requestError{msg: fmt.Sprintf("%s %s", ErrUnknownStatus, status), err: ErrUnknownStatus}
	}
	return []db.SessionStatus{db.SessionStatus(status)}, nil
}

// PlatformSessions lists the sessions of one platform's threads in every status, in the order of
// SessionStatuses, stopping once it has at least max (it may return a page more).
func (d *Directory) PlatformSessions(ctx context.Context, platform string, max int) ([]SessionView, error) {
	// Keys sort by thread key, so each status's rows of the platform are one run after "<platform>:".
	prefix := platform + ":"
	var out []db.Session
	for _, st := range SessionStatuses {
		after := prefix
		for len(out) < max {
			page, err := d.store.SessionsByStatus(ctx, st, after, db.DefaultBatch)
			if err != nil {
				return nil, err
			}
			done := len(page) < db.DefaultBatch
			for _, ss := range page {
				if !strings.HasPrefix(ss.ThreadKey, prefix) {
					done = true
					break
				}
				out = append(out, ss)
			}
			if done || len(page) == 0 {
				break
			}
			after = page[len(page)-1].ThreadKey
		}
	}
	return d.views(out), nil
}

// History returns the thread's newest finished turns, oldest first, at most maxTurns of them and
// at most maxChars of prompts and answers together. It ignores resets: it is what the thread said,
// not what the agent is replayed.
func (d *Directory) History(ctx context.Context, thread ThreadKey, maxTurns, maxChars int) ([]TurnView, error) {
	turns, err := d.store.TurnTranscript(ctx, thread.String(), db.TranscriptLimit{MaxTurns: maxTurns, MaxChars: maxChars})
	if err != nil {
		return nil, err
	}
	out := make([]TurnView, len(turns))
	for i, t := range turns {
		out[i] = TurnView{
			EventID: t.PlatformEventID, UserID: t.UserID, Prompt: t.Prompt, Status: TurnStatus(t.Status),
			Answer: t.Answer, Error: t.Error, CreatedAt: t.CreatedAt, FinishedAt: t.FinishedAt,
		}
	}
	return out, nil
}

func (d *Directory) views(ss []db.Session) []SessionView {
	out := make([]SessionView, len(ss))
	for i, s := range ss {
		out[i] = d.view(s)
	}
	return out
}

// view is the session as the adapters see it, its last error redacted.
func (d *Directory) view(s db.Session) SessionView {
	v := sessionView(s)
	if d.redact != nil && v.LastError != "" {
		v.LastError = d.redact(v.LastError)
	}
	return v
}
