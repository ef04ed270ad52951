package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/bot"
)

// sessionJSON is a session in the API.
type sessionJSON struct {
	ThreadKey string `json:"thread_key"`
	// ConversationID is set for web threads.
	ConversationID  string     `json:"conversation_id,omitempty"`
	Platform        string     `json:"platform"`
	Status          string     `json:"status"`
	Provider        string     `json:"provider"`
	SandboxID       string     `json:"sandbox_id,omitempty"`
	Generation      int64      `json:"generation"`
	Runtime         string     `json:"runtime"`
	ResumeFailCount int        `json:"resume_fail_count"`
	LastError       string     `json:"last_error,omitempty"`
	LastActivityAt  *time.Time `json:"last_activity_at,omitempty"`
	PausedAt        *time.Time `json:"paused_at,omitempty"`
	ResumedAt       *time.Time `json:"resumed_at,omitempty"`
	DestroyedAt     *time.Time `json:"destroyed_at,omitempty"`
	CreatedAt       *time.Time `json:"created_at,omitempty"`
	UpdatedAt       *time.Time `json:"updated_at,omitempty"`

	// Repo is the thread's repository (host/owner/name), with the branch it started from, its own
	// branch, and the commit last pushed from it.
	Repo         string     `json:"repo,omitempty"`
	BaseBranch   string     `json:"base_branch,omitempty"`
	WorkBranch   string     `json:"work_branch,omitempty"`
	PushedCommit string     `json:"pushed_commit,omitempty"`
	PushedAt     *time.Time `json:"pushed_at,omitempty"`
}

func sessionOf(s bot.SessionView) *sessionJSON {
	out := &sessionJSON{
		ThreadKey: s.ThreadKey, Platform: s.Platform, Status: string(s.Status), Provider: s.Provider,
		SandboxID: s.SandboxID, Generation: s.Generation, Runtime: s.Runtime, ResumeFailCount: s.ResumeFailCount,
		LastError: s.LastError, LastActivityAt: timePtr(s.LastActivityAt), PausedAt: timePtr(s.PausedAt),
		ResumedAt: timePtr(s.ResumedAt), DestroyedAt: timePtr(s.DestroyedAt), CreatedAt: timePtr(s.CreatedAt),
		UpdatedAt: timePtr(s.UpdatedAt), Repo: s.Repo, BaseBranch: s.BaseBranch, WorkBranch: s.WorkBranch,
		PushedCommit: s.PushedCommit, PushedAt: timePtr(s.PushedAt),
	}
	if id, ok := strings.CutPrefix(s.ThreadKey, "web:"); ok {
		out.ConversationID = id
	}
	return out
}

// adminSessions is GET /api/admin/sessions[?status=S]: the operations view's table, the same rows as
// "threadbox admin sessions". It is for admins only; reading is not audited (the page reloads it after
// every action), a refusal is.
func (s *Server) adminSessions(w http.ResponseWriter, r *http.Request) {
	actor := identityFrom(r.Context()).actor()
	if !s.admin.IsAdmin(actor) {
		out, _ := s.admin.Run(r.Context(), actor, []string{"sessions"}) // records the refusal
		writeError(w, http.StatusForbidden, out)
		return
	}
	status := r.URL.Query().Get("status")
	all, truncated, err := s.dir.Sessions(r.Context(), bot.SessionStatus(status))
	switch {
	case errors.Is(err, bot.ErrUnknownStatus):
		writeError(w, http.StatusBadRequest, "unknown status "+quoted(status))
		return
	case err != nil:
		s.writeErr(w, err)
		return
	}
	out := struct {
		Sessions  []*sessionJSON `json:"sessions"`
		Truncated bool           `json:"truncated"`
	}{Sessions: make([]*sessionJSON, 0, len(all)), Truncated: truncated}
	for _, ss := range all {
		out.Sessions = append(out.Sessions, sessionOf(ss))
	}
	writeJSON(w, http.StatusOK, out)
}

// adminJSON is the optional body of POST /api/admin/{command}.
type adminJSON struct {
	Thread string `json:"thread"`
	Status string `json:"status"`
	DryRun bool   `json:"dry_run"`
	// Lines is logs' n.
	Lines int `json:"lines"`
	// Provider is move's target provider.
	Provider string `json:"provider"`
}

// adminCommands says which commands the API runs, and whether each needs a thread.
var adminCommands = map[string]bool{
	"help": false, "sessions": false, "stats": false, "reap": false, "drain": false,
	"inspect": true, "pause": true, "resume": true, "destroy": true, "logs": true, "attach": true, "move": true,
}

// adminCommand is POST /api/admin/{command}: bot.Admin.Run as the caller, audited there.
func (s *Server) adminCommand(w http.ResponseWriter, r *http.Request) {
	cmd := r.PathValue("command")
	needsThread, known := adminCommands[cmd]
	if !known {
		writeError(w, http.StatusNotFound, "unknown admin command "+quoted(cmd)+": use help, sessions, inspect, pause, resume, destroy, move, reap, drain, stats, logs or attach")
		return
	}
	var req adminJSON
	if err := decodeJSON(w, r, 64<<10, &req, true); err != nil {
		s.writeErr(w, err)
		return
	}
	argv := []string{cmd}
	if cmd == "stats" && req.Thread != "" {
		needsThread = true // stats <thread>: the sandbox's resource use
	}
	switch {
	case !needsThread && req.Thread != "":
		// A stray argument (the CLI sends one it does not know as the thread) must not be dropped:
		// "reap --dryrun" would reap for real.
		writeError(w, http.StatusBadRequest, cmd+" takes no thread")
		return
	case needsThread && req.Thread == "":
		writeError(w, http.StatusBadRequest, cmd+" needs {\"thread\": \"<thread key>\"}")
		return
	case needsThread:
		if _, err := bot.ParseThreadKey(req.Thread); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		argv = append(argv, req.Thread)
		if cmd == "move" {
			if req.Provider == "" {
				writeError(w, http.StatusBadRequest, "move needs {\"thread\": \"<thread key>\", \"provider\": \"<provider>\"}")
				return
			}
			argv = append(argv, req.Provider)
		}
		if cmd == "logs" && req.Lines > 0 {
			argv = append(argv, strconv.Itoa(req.Lines))
		}
	case cmd == "sessions" && req.Status != "" && !bot.SessionStatus(req.Status).Valid():
		writeError(w, http.StatusBadRequest, "unknown status "+quoted(req.Status))
		return
	case cmd == "sessions" && req.Status != "":
		argv = append(argv, "--status", req.Status)
	case cmd == "reap" && req.DryRun:
		argv = append(argv, "--dry-run")
	}
	out, err := s.admin.Run(r.Context(), identityFrom(r.Context()).actor(), argv)
	switch {
	case errors.Is(err, bot.ErrNotAdmin):
		writeError(w, http.StatusForbidden, out)
	case err != nil:
		// out already says which command failed and why, in the words the chat would use.
		writeError(w, http.StatusInternalServerError, out)
	default:
		writeJSON(w, http.StatusOK, struct {
			Output string `json:"output"`
		}{out})
	}
}
