package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
)

// Turns is what the handler needs from the agent pool.
type Turns interface {
	Submit(ctx context.Context, req agentpool.Request) (agentpool.Ticket, error)
	Cancel(threadKey string) bool
	Depth(threadKey string) int
	Reset(ctx context.Context, threadKey string) error
	// Do runs f on the thread's queue, after the thread's earlier messages (commands keep their
	// order without blocking the adapter).
	Do(threadKey string, f func(ctx context.Context), drop func(reason error)) error
}

// Store is what the handler reads.
type Store interface {
	db.SessionStore
	TurnLastFailedWith(ctx context.Context, threadKey, errText string) (db.Turn, error)
	TurnGetByEvent(ctx context.Context, eventID string) (db.Turn, error)
}

// ErrNotAccepted wraps Handle's error when a message was not taken (nothing recorded, nothing will
// answer it): the adapter must not acknowledge it, so the platform delivers it again (to another
// replica, or after the outage).
var ErrNotAccepted = errors.New("message not accepted")

// HandlerConfig tunes the handler.
type HandlerConfig struct {
	// ProgressInterval is the least time between two progress edits (default 2s: Slack's chat.update
	// tier tolerates about that per message).
	ProgressInterval time.Duration
	// Access says who may use the bot; the zero value lets everyone in.
	Access AccessPolicy
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Metrics counts uploads per platform (default NopChatMetrics).
	Metrics ChatMetrics
	// Usage, when set (the model gateway is on), adds model use and budgets to status.
	Usage *Usage
}

// Handler routes messages: in-thread commands (help, status, stop, reset), admin commands (admin …),
// and everything else to the agent pool as a turn.
type Handler struct {
	cfg    HandlerConfig
	turns  Turns
	store  Store
	admin  *Admin
	log    *zap.Logger
	plat   platforms
	access *access
	// bg tracks replies to commands, which run off the adapter's call.
	bg sync.WaitGroup
	// cmds records commands until their reply is posted (nil: the store or pool cannot).
	cmds *commandRecords
}

// NewHandler builds a handler. admin may be nil (admin commands are then refused).
func NewHandler(cfg HandlerConfig, turns Turns, store Store, admin *Admin, log *zap.Logger) *Handler {
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 2 * time.Second
	}
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NopChatMetrics{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log = log.Named("handler")
	h := &Handler{
		cfg: cfg, turns: turns, store: store, admin: admin, log: log,
		access: newAccess(cfg.Access, admin.IsAdmin, cfg.Now, log.Named("access")),
	}
	h.cmds = commandRecordsFor(store, turns)
	if admin != nil {
		admin.refusals = h.Refusals // admin stats shows them
	}
	return h
}

// Command words recognised in a thread. Only a message that is exactly one of these (any case) is a
// command, so "stop the server" still goes to the agent.
const (
	CmdHelp   = "help"
	CmdStatus = "status"
	CmdStop   = "stop"
	CmdReset  = "reset"
	CmdRetry  = "retry"
	CmdAdmin  = "admin"
)

// HelpText is the in-thread help.
const HelpText = `I run an AI coding agent in a sandbox of its own for this thread. Write what you want done.
Commands (alone in a message):
• status: the sandbox, its generation, queued turns and the last error
• stop: cancel the running turn
• reset: destroy this thread's sandbox and start fresh
• use <provider>: run this thread's sandbox on another enabled provider (a sandbox it has is replaced, the conversation replayed); "use" alone lists them
• runtime <name>: use another enabled agent runtime in this thread (a sandbox it has is replaced, the conversation replayed); "runtime" alone lists them
• retry: run again the message a restart or a lost connection interrupted
• push: push this thread's branch (threadbox/…) and open or update its pull request
• repo owner/name[@branch]: choose this thread's repository; later, move the thread to another one (refused while work is not pushed, unless you add --force)
• admin <command>: operator commands (admins only; "admin help" lists them)
Files the agent writes to output/display/ are posted here.`

// Handle takes one message. It returns as soon as the message is durably taken (a turn recorded and
// queued, or a command started) and never waits for the agent, so adapters call it before they
// acknowledge the platform. Replies come later, through r. A non-nil error wrapping ErrNotAccepted
// means nothing was taken and the message must not be acknowledged; any other error is only for
// the adapter's log (the user was told).
//
// A message the access policy refuses is answered at most once per refusal window, and nothing of it
// is recorded: no turn, no session, no sandbox.
//
// Handle owns msg.Files whatever it returns: a message that does not become a submitted turn (a
// command, a refusal, a duplicate, a failure) has its files discarded here, one that does hands
// them to the pool, which frees them when the turn ends.
func (h *Handler) Handle(ctx context.Context, msg Message, r Replier) error {
	var submitted bool
	err := h.handle(ctx, msg, r, &submitted)
	if !submitted {
		discardFiles(msg.Files)
	}
	return err
}

// handle routes msg; it sets *submitted once msg's files belong to a submitted turn.
func (h *Handler) handle(ctx context.Context, msg Message, r Replier, submitted *bool) error {
	if reason := h.access.admit(msg); reason != "" {
		if h.access.refused(msg, reason) {
			h.replyPrivately(ctx, r, msg.User.ID, refusalText(reason))
		}
		return nil
	}
	text := strings.TrimSpace(msg.Text)
	word := strings.ToLower(text)
	key := msg.Thread.String()
	switch {
	case word == CmdHelp:
		h.reply(ctx, msg, r, CmdHelp, func(context.Context) string { return HelpText })
		return nil
	case word == CmdStatus:
		h.reply(ctx, msg, r, CmdStatus, func(ctx context.Context) string { return h.withWorkspace(ctx, msg, h.status(ctx, msg)) })
		return nil
	case word == CmdStop:
		stop := func(ctx context.Context) string {
			if refusal := h.control(ctx, msg, CmdStop); refusal != "" {
				return refusal
			}
			if h.turns.Cancel(key) {
				return "Stopping the running turn."
			}
			return "Nothing is running."
		}
		if !h.ownerOnly(msg) {
			// Nothing to look up: stop at once, before the adapter's call returns.
			answer := stop(ctx)
			stop = func(context.Context) string { return answer }
		}
		h.reply(ctx, msg, r, CmdStop, stop)
		return nil
	case word == CmdReset:
		// Reset stops the running turn and drops the queued ones itself.
		h.reply(ctx, msg, r, CmdReset, func(ctx context.Context) string {
			if refusal := h.control(ctx, msg, CmdReset); refusal != "" {
				return refusal
			}
			if err := h.turns.Reset(ctx, key); err != nil {
				return "Reset failed: " + Explain(h.log, "reset failed", err, zap.String("thread", key)).String()
			}
			return "Reset: this thread's sandbox is gone; the next message starts a fresh one."
		})
		return nil
	case isUse(word, h.providerNames()):
		h.reply(ctx, msg, r, CmdUse, h.use(ctx, msg, text))
		return nil
	case isRuntime(word, h.runtimeNames()):
		h.reply(ctx, msg, r, CmdRuntime, h.runtime(ctx, msg, text))
		return nil
	case word == CmdRetry:
		return h.retry(ctx, msg, r)
	case word == CmdPush:
		return h.push(ctx, msg, r)
	case strings.HasPrefix(word, CmdRepo):
		if choice, force, ok := repoCommand(text); ok {
			return h.repo(ctx, msg, r, choice, force)
		}
	case isAdminCommand(word, h.admin.IsAdmin(msg.User.Qualified(msg.Thread.Platform))):
		actor, argv := msg.User.Qualified(msg.Thread.Platform), strings.Fields(text)[1:]
		cr, first := h.beginCommand(ctx, msg, r, adminName(argv), msg.User.ID)
		if !first {
			return nil
		}
		run := func(ctx context.Context) {
			out, _ := h.admin.Run(ctx, actor, argv)
			cr.finish(ctx, out)
		}
		if h.turns == nil { // a handler with admin commands only (tests, the CLI)
			h.bg.Go(func() { run(context.WithoutCancel(ctx)) })
			return nil
		}
		if err := h.turns.Do(key, run, func(reason error) { cr.dropped(ctx, reason) }); err != nil {
			cr.abandon(ctx)
			return fmt.Errorf("%w: %w", ErrNotAccepted, err)
		}
		return nil
	}
	return h.turn(ctx, msg, r, submitted)
}

// isAdminCommand reports whether word (the message, trimmed and lower-cased) is an admin command:
// "admin" alone, or followed by one of the admin commands. An admin gets any "admin …" message as a
// command, so that a typo is answered as unknown; anyone else's message whose second word is no
// command ("admin panel is broken…") is an ordinary request for the agent, not an admin attempt to
// refuse and audit.
func isAdminCommand(word string, admin bool) bool {
	f := strings.Fields(word)
	if len(f) == 0 || f[0] != CmdAdmin {
		return false
	}
	return len(f) == 1 || admin || adminCommands[f[1]]
}

// control checks that msg's sender may run a control command (reset, stop) on its thread, and returns
// the refusal to show if not. With access.owner_only_controls, only the thread's starter (the
// session's owner) and admins may. A thread without a session yet has no sandbox to reset; its first
// turn records the owner when it starts.
func (h *Handler) control(ctx context.Context, msg Message, cmd string) string {
	if !h.ownerOnly(msg) {
		return ""
	}
	s, err := h.store.SessionGet(ctx, msg.Thread.String())
	switch {
	case errors.Is(err, db.ErrNotFound):
		return ""
	case err != nil:
		return cmd + " is unavailable: " + Explain(h.log, "looking up the thread's owner", err, zap.String("thread", msg.Thread.String())).String()
	case s.OwnerUserID == "" || s.OwnerUserID == msg.User.ID:
		return ""
	}
	h.access.count(RefusedControl)
	h.log.Info("control command refused: not the thread's owner", zap.String("command", cmd),
		zap.String("user", msg.User.Qualified(msg.Thread.Platform)), zap.String("thread", msg.Thread.String()))
	return notOwnerText(cmd)
}

// ownerOnly reports whether msg's sender must own the thread to run a control command.
func (h *Handler) ownerOnly(msg Message) bool {
	return h.cfg.Access.OwnerOnlyControls && !h.admin.IsAdmin(msg.User.Qualified(msg.Thread.Platform))
}

// reply answers msg, the command name, off the adapter's call: the answer may need the database or
// the chat API. The command is recorded first (durable command replies), so a crash before its reply
// is posted still gets its sender an answer.
func (h *Handler) reply(ctx context.Context, msg Message, r Replier, name string, answer func(ctx context.Context) string) {
	cr, first := h.beginCommand(ctx, msg, r, name, "")
	if !first {
		return
	}
	ctx = context.WithoutCancel(ctx)
	h.bg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, commandTimeout)
		defer cancel()
		cr.finish(ctx, answer(ctx))
	})
}

// adminName is how an admin command is named in its record: "admin" and its subcommand when known,
// never its arguments (thread keys, user ids).
func adminName(argv []string) string {
	if len(argv) > 0 && adminCommands[strings.ToLower(argv[0])] {
		return CmdAdmin + " " + strings.ToLower(argv[0])
	}
	return CmdAdmin
}

// replyPrivately posts text only userID sees where the platform can (Slack's ephemeral messages),
// so that a refusal does not land in a channel for everyone; elsewhere it is an ordinary post.
func (h *Handler) replyPrivately(ctx context.Context, r Replier, userID, text string) {
	ctx = context.WithoutCancel(ctx)
	h.bg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, commandTimeout)
		defer cancel()
		var err error
		if pp, ok := r.(PrivatePoster); ok {
			err = pp.PostPrivate(ctx, userID, text)
			if errors.Is(err, ErrNoPrivate) {
				err = r.Post(ctx, text) // a refusal is no secret: told in the open rather than not at all
			}
		} else {
			err = r.Post(ctx, text)
		}
		if err != nil {
			h.log.Warn("posting a refusal", zap.Error(err))
		}
	})
}

// commandTimeout bounds one command's work and reply.
const commandTimeout = 5 * time.Minute

// Wait blocks until the command replies in flight are done, or ctx ends (shutdown).
func (h *Handler) Wait(ctx context.Context) error { return WaitGroupContext(ctx, &h.bg) }

// WaitGroupContext waits for wg, or until ctx ends.
func WaitGroupContext(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry submits again the thread's last prompt that was interrupted (a restart, a run the runtime
// lost track of). The retry's event id
// names the interrupted turn, so a second retry of it is a duplicate.
func (h *Handler) retry(ctx context.Context, msg Message, r Replier) error {
	t, err := h.store.TurnLastFailedWith(ctx, msg.Thread.String(), agentpool.InterruptedText)
	switch {
	case errors.Is(err, db.ErrNotFound):
		h.reply(ctx, msg, r, CmdRetry, func(context.Context) string { return "Nothing to retry: no message of this thread was interrupted." })
		return nil
	case err != nil:
		return fmt.Errorf("%w: %w", ErrNotAccepted, err)
	}
	again := msg
	again.Text, again.Files, again.EventID, again.replyEvent = t.Prompt, nil, fmt.Sprintf("retry:%d", t.ID), msg.EventID
	if note := filesNotResent(t.Delivery); note != "" {
		again.Notes = append(slices.Clip(again.Notes), note)
	}
	var submitted bool // again has no files: the retry message's own are Handle's to discard
	return h.turn(ctx, again, r, &submitted)
}

// filesNotResent is the retry's note naming the interrupted message's files, which the retry does
// not attach again (the platform's copy may be gone, and the retry has no files of its own); "" if
// it had none or its record cannot be read.
func filesNotResent(rec json.RawMessage) string {
	var d delivery
	if json.Unmarshal(rec, &d) != nil || len(d.Files) == 0 {
		return ""
	}
	names := make([]string, len(d.Files))
	for i, f := range d.Files {
		names[i] = f.Name
	}
	return "The files attached to the interrupted message were not re-sent with the retry: " +
		strings.Join(names, ", ") + ". Attach them again if the agent needs them."
}

// turn submits msg as a turn, and sets *submitted once the pool has taken it (and its files).
// ErrEventReused is Handle's answer to a message under an event id already recorded for another
// message (different text or files): not a redelivery, so not answered as one. Only a client that
// picks its own ids can do this (the web chat's Idempotency-Key); it is told, rather than have its
// message dropped as a duplicate.
var ErrEventReused = errors.New("this event id already names another message")

// reusedEventID reports whether msg, found to be a duplicate, differs from the message recorded
// under its event id. A failed read says no: a duplicate is the usual case.
func (h *Handler) reusedEventID(ctx context.Context, msg Message) bool {
	t, d, err := h.recorded(ctx, msg.EventID)
	switch {
	case t.ID == 0:
		return false
	case t.Prompt != db.StorableText(msg.Text) || t.ThreadKey != msg.Thread.String():
		return true
	case err != nil || len(d.Files) != len(msg.Files):
		return err == nil
	}
	for i, f := range msg.Files {
		if d.Files[i].Name != f.Name || d.Files[i].Size != f.Size {
			return true
		}
	}
	return false
}

// retriedBy reports whether msg, a retry found to be a duplicate, is the message that made the
// retry: the platform delivered that message again (its dedupe missed it: Redis down, or past its
// window), and it was answered already. Another retry message of the same turn is told so.
func (h *Handler) retriedBy(ctx context.Context, msg Message) bool {
	_, d, err := h.recorded(ctx, msg.EventID)
	return err == nil && sameJSON(d.Reply, msg.Reply)
}

// recorded reads the turn recorded under eventID and its reply address. A turn that cannot be read
// comes back zero; one whose address cannot be decoded comes back with the error.
func (h *Handler) recorded(ctx context.Context, eventID string) (db.Turn, delivery, error) {
	t, err := h.store.TurnGetByEvent(ctx, eventID)
	if err != nil {
		return db.Turn{}, delivery{}, err
	}
	var d delivery
	if err := json.Unmarshal(t.Delivery, &d); err != nil {
		return t, delivery{}, err
	}
	return t, d, nil
}

// sameJSON compares two JSON values by meaning: PostgreSQL's jsonb does not keep key order.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func (h *Handler) turn(ctx context.Context, msg Message, r Replier, submitted *bool) error {
	// The sink's final mark and the 👀 below are sent from different goroutines.
	r = withOrderedMarks(r)
	if strings.TrimSpace(msg.Text) == "" && len(msg.Files) == 0 {
		h.reply(ctx, msg, r, "message", func(context.Context) string { return "Send me something to do (or \"help\")." })
		return nil
	}
	if strings.ContainsRune(msg.Text, 0) {
		// NUL cannot be stored (PostgreSQL text) nor passed to a command line: say so plainly.
		h.bg.Go(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
			defer cancel()
			_ = r.Post(ctx, "Your message contains NUL bytes (\\0), which I cannot pass on. Remove them and send it again.")
			_ = r.React(ctx, ReactError) // last, as at the end of a turn: it marks the message as answered
		})
		return nil
	}
	key := msg.Thread.String()
	dl, err := encodeDelivery(msg)
	if err != nil {
		p := Explain(h.log, "message not taken", err, zap.String("thread", key), zap.String("event", msg.EventID))
		h.reply(ctx, msg, r, "message", func(context.Context) string { return "I could not take that: " + p.String() })
		return nil
	}
	sink := newReplySink(context.WithoutCancel(ctx), r, h.cfg.ProgressInterval, h.log.With(zap.String("thread", key)))
	sink.notes = msg.Notes
	sink.met, sink.platform = h.cfg.Metrics, msg.Thread.Platform
	files := make([]agentpool.InboundFile, len(msg.Files))
	for i, f := range msg.Files {
		files[i] = agentpool.InboundFile{Name: f.Name, Size: f.Size, Open: f.Open, Discard: f.Discard}
	}
	tk, err := h.turns.Submit(ctx, agentpool.Request{
		ThreadKey: key, Platform: msg.Thread.Platform, ChannelID: msg.ChannelID,
		UserID: msg.User.ID, EventID: msg.EventID, Text: msg.Text, Files: files, Sink: sink, Delivery: dl,
		Context: messageContext(msg), UserName: msg.User.Name,
	})
	switch {
	case errors.Is(err, db.ErrDuplicate):
		if strings.HasPrefix(msg.EventID, "retry:") {
			if !h.retriedBy(ctx, msg) {
				h.reply(ctx, msg, r, CmdRetry, func(context.Context) string { return "That message was already retried." })
			}
			return nil
		}
		if h.reusedEventID(ctx, msg) {
			return ErrEventReused
		}
		h.log.Debug("duplicate event ignored", zap.String("event", msg.EventID))
		return nil
	case errors.Is(err, agentpool.ErrQueueFull):
		p := Explain(h.log, "message refused", err, zap.String("thread", key), zap.String("event", msg.EventID))
		h.bg.Go(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
			defer cancel()
			_ = r.Post(ctx, p.String())
			_ = r.React(ctx, ReactError)
		})
		return nil
	case err != nil:
		// Not recorded: the platform must deliver it again (closing, or the database is down).
		return fmt.Errorf("%w: %w", ErrNotAccepted, err)
	}
	*submitted = true
	h.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
		defer cancel()
		_ = r.React(ctx, ReactSeen)
	})
	if tk.Ahead > 0 {
		sink.setStatus(fmt.Sprintf("queued behind %d turn(s)…", tk.Ahead))
	}
	return nil
}

func (h *Handler) status(ctx context.Context, msg Message) string {
	key := msg.Thread.String()
	s, err := h.store.SessionGet(ctx, key)
	depth := h.turns.Depth(key)
	var out string
	switch {
	case errors.Is(err, db.ErrNotFound):
		out = fmt.Sprintf("No sandbox yet for this thread. Queued turns: %d.", depth)
	case err != nil:
		return "Status unavailable: " + Explain(h.log, "status failed", err, zap.String("thread", key)).String()
	default:
		out = formatSession(s, depth, false)
	}
	if h.cfg.Usage != nil {
		usage, err := h.cfg.Usage.statusLines(ctx, key, msg.User.ID)
		if err != nil {
			usage = "Model use unavailable: " + Explain(h.log, "reading model usage failed", err, zap.String("thread", key)).String()
		}
		out += "\n" + usage
	}
	return out
}

// FormatSession renders a session for admin inspect, with its last error as recorded: operators see
// the provider's own words.
func FormatSession(s db.Session, depth int) string { return formatSession(s, depth, true) }

// LastErrorNote is what a user who is not an admin is told of a session's last error: that there was
// one, not its text (the provider's own words, internal detail). The in-thread status and the web
// chat's conversation API say the same.
const LastErrorNote = "The last sandbox operation failed; the next message tries again (an operator sees why with \"admin inspect\")."

// formatSession renders a session; withError includes the recorded last error, which is internal
// text, so the in-thread status (read by every user of the thread) only says there was one.
func formatSession(s db.Session, depth int, withError bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Sandbox: %s (%s %s), generation %d\n", s.Status, s.Provider, shortID(s.SandboxID), s.Generation)
	fmt.Fprintf(&b, "Runtime: %s, queued or running turns: %d\n", s.Runtime, depth)
	if !s.LastActivityAt.IsZero() {
		fmt.Fprintf(&b, "Last activity: %s\n", s.LastActivityAt.Format(time.RFC3339))
	}
	if !s.PausedAt.IsZero() && s.Status == db.SessionPaused {
		fmt.Fprintf(&b, "Paused since: %s\n", s.PausedAt.Format(time.RFC3339))
	}
	switch {
	case s.LastError != "" && withError:
		fmt.Fprintf(&b, "Last error: %s\n", s.LastError)
	case s.LastError != "":
		b.WriteString(LastErrorNote + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	if id == "" {
		return "none"
	}
	return id
}
