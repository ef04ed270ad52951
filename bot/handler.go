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

// Turns is what the handler needs from the agent pool.
type Turns interface {
	Submit(ctx context.Context, req agentpool.Request) (agentpool.Ticket, error)
	Cancel(threadKey string) bool
	Depth(threadKey string) int
	Reset(ctx context.Context, threadKey string) error
}

// HandlerConfig tunes the handler.
type HandlerConfig struct {
	// ProgressInterval is the least time between two progress edits (default 2s: Slack's chat.update
	// tier tolerates about that per message).
	ProgressInterval time.Duration
}

// Handler routes messages: in-thread commands (help, status, stop, reset), admin commands (admin …),
// and everything else to the agent pool as a turn.
type Handler struct {
	cfg   HandlerConfig
	turns Turns
	store db.SessionStore
	admin *Admin
	log   *zap.Logger
}

// NewHandler builds a handler. admin may be nil (admin commands are then refused).
func NewHandler(cfg HandlerConfig, turns Turns, store db.SessionStore, admin *Admin, log *zap.Logger) *Handler {
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 2 * time.Second
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Handler{cfg: cfg, turns: turns, store: store, admin: admin, log: log.Named("handler")}
}

// Command words recognised in a thread. Only a message that is exactly one of these (any case) is a
// command, so "stop the server" still goes to the agent.
const (
	CmdHelp   = "help"
	CmdStatus = "status"
	CmdStop   = "stop"
	CmdReset  = "reset"
	CmdAdmin  = "admin"
)

// HelpText is the in-thread help.
const HelpText = `I run an AI coding agent in a sandbox of its own for this thread. Write what you want done.
Commands (alone in a message):
• status: the sandbox, its generation, queued turns and the last error
• stop: cancel the running turn
• reset: destroy this thread's sandbox and start fresh
• admin <command>: operator commands (admins only; "admin help" lists them)
Files the agent writes to output/display/ are posted here.`

// Handle processes one message. Errors are reported into the thread; the returned error is only for
// the adapter's logs.
func (h *Handler) Handle(ctx context.Context, msg Message, r Replier) error {
	text := strings.TrimSpace(msg.Text)
	word := strings.ToLower(text)
	switch {
	case word == CmdHelp:
		return r.Post(ctx, HelpText)
	case word == CmdStatus:
		return r.Post(ctx, h.status(ctx, msg.Thread))
	case word == CmdStop:
		if h.turns.Cancel(msg.Thread.String()) {
			return r.Post(ctx, "Stopping the running turn.")
		}
		return r.Post(ctx, "Nothing is running.")
	case word == CmdReset:
		// Reset stops the running turn and drops the queued ones itself.
		if err := h.turns.Reset(ctx, msg.Thread.String()); err != nil {
			return r.Post(ctx, "Reset failed: "+UserError(err))
		}
		return r.Post(ctx, "Reset: this thread's sandbox is gone; the next message starts a fresh one.")
	case word == CmdAdmin || strings.HasPrefix(word, CmdAdmin+" "):
		out, _ := h.admin.Run(ctx, msg.User.Qualified(msg.Thread.Platform), strings.Fields(text)[1:])
		return r.Post(ctx, out)
	}
	return h.turn(ctx, msg, r)
}

func (h *Handler) turn(ctx context.Context, msg Message, r Replier) error {
	if strings.TrimSpace(msg.Text) == "" && len(msg.Files) == 0 {
		return r.Post(ctx, "Send me something to do (or \"help\").")
	}
	if strings.ContainsRune(msg.Text, 0) {
		// NUL cannot be stored (PostgreSQL text) nor passed to a command line: say so plainly.
		err := r.Post(ctx, "Your message contains NUL bytes (\\0), which I cannot pass on. Remove them and send it again.")
		_ = r.React(ctx, ReactError) // last, as at the end of a turn: it marks the message as answered
		return err
	}
	_ = r.React(ctx, ReactSeen)
	sink := newReplySink(context.WithoutCancel(ctx), r, h.cfg.ProgressInterval, h.log)
	files := make([]agentpool.InboundFile, len(msg.Files))
	for i, f := range msg.Files {
		files[i] = agentpool.InboundFile{Name: f.Name, Data: f.Data}
	}
	tk, err := h.turns.Submit(ctx, agentpool.Request{
		ThreadKey: msg.Thread.String(), Platform: msg.Thread.Platform, ChannelID: msg.ChannelID,
		UserID: msg.User.ID, EventID: msg.EventID, Text: msg.Text, Files: files, Sink: sink,
	})
	switch {
	case errors.Is(err, db.ErrDuplicate):
		h.log.Debug("duplicate event ignored", zap.String("event", msg.EventID))
		return nil
	case err != nil:
		perr := r.Post(ctx, "I could not take that: "+UserError(err))
		_ = r.React(ctx, ReactError)
		return perr
	case tk.Ahead > 0:
		sink.setStatus(fmt.Sprintf("queued behind %d turn(s)…", tk.Ahead))
	}
	return nil
}

func (h *Handler) status(ctx context.Context, thread ThreadKey) string {
	key := thread.String()
	s, err := h.store.SessionGet(ctx, key)
	depth := h.turns.Depth(key)
	if errors.Is(err, db.ErrNotFound) {
		return fmt.Sprintf("No sandbox yet for this thread. Queued turns: %d.", depth)
	}
	if err != nil {
		return "Status unavailable: " + UserError(err)
	}
	return FormatSession(s, depth)
}

// FormatSession renders a session for status and admin inspect.
func FormatSession(s db.Session, depth int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Sandbox: %s (%s %s), generation %d\n", s.Status, s.Provider, shortID(s.SandboxID), s.Generation)
	fmt.Fprintf(&b, "Runtime: %s, queued or running turns: %d\n", s.Runtime, depth)
	if !s.LastActivityAt.IsZero() {
		fmt.Fprintf(&b, "Last activity: %s\n", s.LastActivityAt.Format(time.RFC3339))
	}
	if !s.PausedAt.IsZero() && s.Status == db.SessionPaused {
		fmt.Fprintf(&b, "Paused since: %s\n", s.PausedAt.Format(time.RFC3339))
	}
	if s.LastError != "" {
		fmt.Fprintf(&b, "Last error: %s\n", s.LastError)
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

// UserError renders an error for a chat: one line, bounded, and without internal noise.
func UserError(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, agentpool.ErrClosed):
		return "the bot is shutting down; try again in a minute."
	case errors.Is(err, agentpool.ErrStuck):
		return err.Error()
	case errors.Is(err, agentpool.ErrReset):
		return "the thread was reset before it ran."
	case errors.Is(err, context.Canceled):
		return "stopped."
	case errors.Is(err, agentpool.ErrProviderUnavailable):
		return "the sandbox service is unavailable right now (it may be restarting); try again in a few minutes."
	case errors.Is(err, context.DeadlineExceeded):
		return "it took too long and was stopped."
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if len(msg) > 300 {
		msg = msg[:297] + "…"
	}
	return msg
}
