package bot

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// AdminOps are the operations behind admin commands; agentpool.Ops implements them over the pool and
// the maintenance loops, so admin actions take the same thread locks as turns.
type AdminOps interface {
	Pause(ctx context.Context, threadKey string) error
	Resume(ctx context.Context, threadKey string) error
	Destroy(ctx context.Context, threadKey string) error
	// Reap destroys (or with dryRun only lists) this deployment's orphaned sandboxes.
	Reap(ctx context.Context, dryRun bool) (string, error)
	// Drain stops taking new turns and waits for the running ones.
	Drain(ctx context.Context) error
	// Stats is a one-paragraph summary of the pool and provider.
	Stats(ctx context.Context) (string, error)
	Depth(threadKey string) int
	// RuntimeLog tails the runtime's own log in the thread's sandbox.
	RuntimeLog(ctx context.Context, threadKey string, lines int) (agentpool.RuntimeLog, error)
	// SandboxUsage reads the thread's sandbox's CPU, memory, disk and network use.
	SandboxUsage(ctx context.Context, threadKey string) (agentpool.SandboxUsage, error)
	// Attach says how to open a shell in the thread's sandbox (it never opens one).
	Attach(ctx context.Context, threadKey string) (agentpool.Attach, error)
}

// AdminStore is what admin commands read and write in the database.
type AdminStore interface {
	db.SessionStore
	db.AuditStore
}

// Admin runs admin commands for allowlisted users and audits every attempt, refused ones included.
type Admin struct {
	store  AdminStore
	ops    AdminOps
	admins map[string]bool
	log    *zap.Logger
	// refusals, when set, reports the access policy's refusals for stats (the handler sets it).
	refusals func() map[string]int64
	met      ChatMetrics
	// numbers, when set, reads the figures behind /metrics for the global stats.
	numbers func(ctx context.Context) ([]Stat, error)
	// usage, when set, adds today's model use to the global stats.
	usage *Usage
	// redact, when set, takes secrets out of every reply (see WithRedaction).
	redact func(string) string
}

// WithRedaction makes every reply pass through redact, the log's own redaction, and returns a.
// Replies quote internal text (a session's last error, a runtime's log, a failure) that can hold a
// URL with credentials or a key, and they are posted to a chat.
func (a *Admin) WithRedaction(redact func(string) string) *Admin {
	a.redact = redact
	return a
}

// WithUsage makes the global stats show today's model use, budgets and top users (the gateway is
// on), and returns a.
func (a *Admin) WithUsage(u *Usage) *Admin {
	a.usage = u
	return a
}

// NewAdmin builds the admin command set. admins are platform:user_id strings (admin.users).
func NewAdmin(store AdminStore, ops AdminOps, admins []string, log *zap.Logger) *Admin {
	m := map[string]bool{}
	for _, a := range admins {
		m[a] = true
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Admin{store: store, ops: ops, admins: m, log: log.Named("admin"), met: NopChatMetrics{}}
}

// WithMetrics makes a count refusals (ChatRefusedAccess, under the actor's platform) and returns a.
func (a *Admin) WithMetrics(m ChatMetrics) *Admin {
	if m != nil {
		a.met = m
	}
	return a
}

// ErrNotAdmin is returned for a command from a user not in admin.users.
var ErrNotAdmin = errors.New("admin commands are limited to the users in admin.users")

// AdminHelp lists the admin commands.
const AdminHelp = `admin commands:
  sessions [--status S]   list sessions (S: creating, active, paused, error, destroyed, …)
  inspect <thread>        one session in detail
  pause <thread>          stop the thread's sandbox, keeping its files
  resume <thread>         start it again
  destroy <thread>        destroy the thread's sandbox (its history is kept)
  move <thread> <provider> run the thread on another enabled provider (its sandbox is replaced, history replayed)
  reap [--dry-run]        destroy this deployment's sandboxes that no session owns
  drain                   stop taking new turns and let running ones finish
  stats                   pool and session counts, model use today, and the numbers behind /metrics
  stats <thread>          CPU, memory, disk and network use of the thread's sandbox
  logs <thread> [n]       the last n lines (default 50) of the runtime's own log in the sandbox
  attach <thread>         the command that opens a shell in the thread's sandbox`

// adminCommands are the commands Admin.Run knows (AdminHelp lists them).
var adminCommands = map[string]bool{"help": true, "sessions": true, "inspect": true, "pause": true, "resume": true,
	"destroy": true, "move": true, "reap": true, "drain": true, "stats": true, "logs": true, "attach": true}

// KnownAdminCommand reports whether name (lower case) is one of the admin commands.
func KnownAdminCommand(name string) bool { return adminCommands[name] }

// IsAdmin reports whether actor (platform:user_id) may run admin commands.
func (a *Admin) IsAdmin(actor string) bool { return a != nil && a.admins[actor] }

// Audit results. Every command leaves an append-only trail: AuditStarted is written before the action
// and the outcome (AuditOK or "error: …") after it, as a second entry rather than an update, so the
// log is never rewritten. A "started" with no outcome means the process died during the action.
const (
	AuditStarted = "started"
	AuditOK      = "ok"
	AuditDenied  = "denied"
)

// ErrAuditUnavailable refuses an admin command whose audit record could not be written.
var ErrAuditUnavailable = errors.New("the audit log cannot be written, so admin commands are refused until it can")

// Run executes argv for actor and returns the text to show. Every call is audited, and the action runs
// only once its audit record is written: an admin action that leaves no trace must not happen.
func (a *Admin) Run(ctx context.Context, actor string, argv []string) (string, error) {
	if a == nil {
		return "Admin commands are not configured.", ErrNotAdmin
	}
	cmd, target := "help", ""
	if len(argv) > 0 {
		cmd = strings.ToLower(argv[0])
	}
	if len(argv) > 1 {
		target = strings.Join(argv[1:], " ")
	}
	// Both are the sender's text, of any length: bounded as the audit bounds them, for the log lines
	// too (a refusal is anyone's to cause). A command cut short is no command, so dispatch is the same.
	cmd, target = cutText(cmd, maxAuditText), cutText(target, maxAuditText)
	if !a.admins[actor] {
		_ = a.audit(ctx, actor, cmd, target, AuditDenied) // refused either way; a failure is logged
		platform, _, _ := strings.Cut(actor, ":")
		a.met.ChatEvent(platform, ChatRefusedAccess)
		a.log.Warn("admin command refused", zap.String("actor", actor), zap.String("command", cmd))
		return "Sorry: admin commands are limited to the users listed in admin.users. This attempt was logged.", ErrNotAdmin
	}
	if err := a.audit(ctx, actor, cmd, target, AuditStarted); err != nil {
		return fmt.Sprintf("%s refused: %s.", cmd, ErrAuditUnavailable), fmt.Errorf("admin %s: %w: %w", cmd, ErrAuditUnavailable, err)
	}
	out, err := a.dispatch(ctx, cmd, argv)
	result := AuditOK
	if err != nil {
		p := Explain(a.log, "admin command failed", err, zap.String("actor", actor), zap.String("command", cmd),
			zap.String("target", target))
		// The audit keeps the code and the ref; the log has the full error under the ref.
		result = "error: " + string(p.Code)
		if p.Ref != "" {
			result += " (ref " + p.Ref + ")"
		}
		out = fmt.Sprintf("%s failed: %s", cmd, p)
	}
	// The action has happened: failing to record its outcome changes nothing for the caller, and the
	// "started" entry already says who did what.
	_ = a.audit(ctx, actor, cmd, target, result)
	if a.redact != nil {
		out = a.redact(out)
	}
	return out, err
}

// maxAuditText bounds, in runes, the command and the target an audit entry keeps of the sender's
// text (the store's escaping may lengthen what is kept). Anyone may send "admin destroy" followed by
// a platform's longest message, and the log is append-only.
const maxAuditText = 512

// audit appends one entry; the store escapes control characters in it. Failures are logged here.
func (a *Admin) audit(ctx context.Context, actor, action, target, result string) error {
	action, target = cutText(action, maxAuditText), cutText(target, maxAuditText)
	// Audited even when the caller's context is gone: the record matters most then.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := a.store.AuditAppend(actx, db.AuditEntry{Actor: actor, Action: "admin " + action, Target: target, Result: result})
	if err != nil {
		a.log.Error("writing the audit log", zap.String("actor", actor), zap.String("command", action),
			zap.String("result", result), zap.Error(err))
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

func (a *Admin) dispatch(ctx context.Context, cmd string, argv []string) (string, error) {
	args := argv
	if len(args) > 0 {
		args = args[1:]
	}
	one := func() (string, error) {
		if len(args) != 1 {
			return "", badRequest("usage: %s <thread>", cmd)
		}
		return threadArg(args[0])
	}
	switch cmd {
	case "help", "":
		return AdminHelp, nil
	case "sessions":
		fs := flag.NewFlagSet("sessions", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		status := fs.String("status", "", "")
		if err := fs.Parse(args); err != nil {
			return "", badRequest("usage: sessions [--status S]")
		}
		return a.sessions(ctx, *status)
	case "inspect":
		key, err := one()
		if err != nil {
			return "", err
		}
		s, err := a.store.SessionGet(ctx, key)
		if err != nil {
			return "", fmt.Errorf("%s: %w", key, err)
		}
		return fmt.Sprintf("%s\n%s\nHandle: %s", key, FormatSession(s, a.ops.Depth(key)), s.Handle), nil
	case "pause", "resume", "destroy":
		key, err := one()
		if err != nil {
			return "", err
		}
		op := map[string]func(context.Context, string) error{"pause": a.ops.Pause, "resume": a.ops.Resume, "destroy": a.ops.Destroy}[cmd]
		if err := op(ctx, key); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: %s done", key, cmd), nil
	case "move":
		return a.move(ctx, args)
	case "reap":
		// Anything but exactly --dry-run is refused: a misspelt flag must not destroy sandboxes.
		dry := len(args) == 1 && args[0] == "--dry-run"
		if len(args) > 0 && !dry {
			return "", badRequest("usage: reap [--dry-run]")
		}
		return a.ops.Reap(ctx, dry)
	case "drain":
		if err := a.ops.Drain(ctx); err != nil {
			return "", err
		}
		return "Drained: no new turns are taken; running turns have finished.", nil
	case "stats":
		if len(args) == 1 {
			key, err := threadArg(args[0])
			if err != nil {
				return "", err
			}
			return a.sandboxStats(ctx, key)
		}
		if len(args) > 1 {
			return "", badRequest("usage: stats [<thread>]")
		}
		out, err := a.globalStats(ctx)
		if err == nil && a.refusals != nil {
			out += "\n" + formatRefusals(a.refusals())
		}
		return out, err
	case "logs":
		if len(args) < 1 || len(args) > 2 {
			return "", badRequest("usage: logs <thread> [n]")
		}
		key, err := threadArg(args[0])
		if err != nil {
			return "", err
		}
		n := agentpool.DefaultLogLines
		if len(args) == 2 {
			v, err := strconv.Atoi(args[1])
			if err != nil || v <= 0 || v > agentpool.MaxLogLines {
				return "", badRequest("logs: n must be a number from 1 to %d", agentpool.MaxLogLines)
			}
			n = v
		}
		return a.logs(ctx, key, n)
	case "attach":
		key, err := one()
		if err != nil {
			return "", err
		}
		return a.attach(ctx, key)
	}
	return "", badRequest("unknown admin command %q\n%s", cmd, AdminHelp)
}

// maxQuotedKey bounds, in runes, how much of a malformed thread key a refusal quotes.
const maxQuotedKey = 80

// threadArg checks a command's thread key the way the web API does, so a malformed one is refused
// with the forms a key takes before the store or the pool sees it.
func threadArg(s string) (string, error) {
	key, err := ParseThreadKey(s)
	if err != nil {
		// The key is the sender's text, of any length: quote enough of it to recognise.
		return "", badRequest("thread key %q: %s", cutText(s, maxQuotedKey), threadKeyForms)
	}
	return key.String(), nil
}

// SessionStatuses is the order sessions are listed in when no status is given (chat, CLI and web).
var SessionStatuses = []db.SessionStatus{db.SessionActive, db.SessionCreating, db.SessionResuming,
	db.SessionPausing, db.SessionPaused, db.SessionError, db.SessionDestroying, db.SessionDestroyed}

// SessionsListMax bounds one listing; the JSON API pages for more.
const SessionsListMax = 200

func (a *Admin) sessions(ctx context.Context, status string) (string, error) {
	statuses, err := statusFilter(SessionStatus(status))
	if err != nil {
		return "", err
	}
	all, err := ListSessions(ctx, a.store, statuses, SessionsListMax)
	if err != nil {
		return "", err
	}
	if len(all) == 0 {
		return "No sessions.", nil
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "THREAD\tSTATUS\tPROVIDER\tGEN\tLAST ACTIVITY")
	for _, s := range all {
		last := "-"
		if !s.LastActivityAt.IsZero() {
			last = s.LastActivityAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", s.ThreadKey, s.Status, s.Provider, s.Generation, last)
	}
	_ = w.Flush()
	if len(all) == SessionsListMax {
		fmt.Fprintf(&b, "(first %d shown)\n", SessionsListMax)
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// SessionLister pages through sessions by status; db.SessionStore implements it.
type SessionLister interface {
	SessionsByStatus(ctx context.Context, status db.SessionStatus, afterThreadKey string, limit int) ([]db.Session, error)
}

// ListSessions lists sessions in the given statuses, up to max, the same way for chat, CLI and web.
func ListSessions(ctx context.Context, store SessionLister, statuses []db.SessionStatus, max int) ([]db.Session, error) {
	var all []db.Session
	for _, st := range statuses {
		after := ""
		for len(all) < max {
			page, err := store.SessionsByStatus(ctx, st, after, min(db.MaxBatch, max-len(all)))
			if err != nil {
				return nil, err
			}
			all = append(all, page...)
			if len(page) == 0 || len(page) < min(db.MaxBatch, max-len(all)+len(page)) {
				break
			}
			after = page[len(page)-1].ThreadKey
		}
	}
	return all, nil
}
