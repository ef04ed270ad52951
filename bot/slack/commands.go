package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"go.uber.org/zap"
)

// maxCommandJSON bounds a command's reply text as it is sent, JSON-encoded (escapes included): under
// Socket Mode's 20 KB response limit with room for the envelope, and readable in an ephemeral message.
const maxCommandJSON = 12000

// CommandsHandler serves POST /slack/commands: the /threadbox slash command, signature verified,
// mapped to the admin commands as the actor "slack:<user_id>" (refused and audited for non-admins).
// The reply is ephemeral: in the HTTP response when the command finishes within CommandBudget, else
// "working on it" now and the result on the command's response_url.
func (a *Adapter) CommandsHandler() http.Handler {
	return http.HandlerFunc(a.serveCommands)
}

func (a *Adapter) serveCommands(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readVerified(w, r)
	if !ok {
		return
	}
	// Slack never retries a slash command, so one signature seen twice is a captured request replayed
	// within the signature window: an admin command must not run again. The mark lives DedupeTTL (1h by
	// default, and shared through Redis), longer than the window a replay can be accepted in. The
	// signature is lowercased: its hex verifies in either case, so a replay could respell it to dodge
	// the mark (the timestamp is signed as sent, so it has one spelling).
	sig := r.Header.Get("X-Slack-Request-Timestamp") + ":" + strings.ToLower(r.Header.Get("X-Slack-Signature"))
	if !a.seen.First(r.Context(), "cmdsig:"+sig) {
		a.log.Warn("ignored a replayed slash command (same signature and timestamp)", zap.String("remote", r.RemoteAddr))
		writeEphemeral(w, "This command was already received; the repeat is ignored.")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	cmd, err := slack.SlashCommandParse(r)
	if err != nil || cmd.UserID == "" {
		http.Error(w, "malformed slash command", http.StatusBadRequest)
		return
	}
	if a.queue.isClosed() {
		writeEphemeral(w, "Threadbox is restarting; try again in a minute.")
		return
	}
	writeEphemeral(w, a.runCommand(r.Context(), cmd))
}

// ephemeral is a slash command reply only its user sees.
type ephemeral struct {
	ResponseType string `json:"response_type"`
	Text         string `json:"text"`
}

func writeEphemeral(w http.ResponseWriter, text string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ephemeral{ResponseType: "ephemeral", Text: text})
}

// runCommand runs the admin command and returns the immediate reply. A command that outlives the
// budget keeps running (tracked, so Close waits for it) and posts its result to the response_url.
func (a *Adapter) runCommand(ctx context.Context, cmd slack.SlashCommand) string {
	argv := strings.Fields(cmd.Text)
	if len(argv) > 0 && strings.EqualFold(argv[0], "admin") {
		argv = argv[1:] // "/threadbox admin sessions" reads like the in-thread form
	}
	if a.opts.Admin == nil {
		return "Admin commands are not configured on this bot."
	}
	actor := "slack:" + cmd.UserID
	// done hands the result over while runCommand waits; once it stops waiting (late), the command's
	// own task posts the result. The task is already tracked, so that needs no new background work,
	// which Close may refuse by then: the promised result is never dropped.
	done := make(chan string, 1)
	var mu sync.Mutex
	late := false
	// The command runs on the adapter's context, not the request's: it must not be cut off when the
	// HTTP response goes out.
	if !a.queue.add(func() {
		res, _ := a.opts.Admin.Run(a.base, actor, argv)
		out := formatCommandOutput(res)
		mu.Lock()
		posted := late
		if !late {
			done <- out
		}
		mu.Unlock()
		if posted {
			a.postLate(cmd, out)
		}
	}) {
		return "Threadbox is restarting; try again in a minute."
	}
	t := time.NewTimer(a.opts.CommandBudget)
	defer t.Stop()
	select {
	case out := <-done:
		return out
	case <-t.C:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case out := <-done: // finished meanwhile
		return out
	default:
	}
	late = true
	if cmd.ResponseURL == "" {
		return "Working on it; the result will be in the bot's log."
	}
	return "Working on it…"
}

// postLate posts the result of a command that outlived its budget to its response_url (or logs it,
// when the command came without one).
func (a *Adapter) postLate(cmd slack.SlashCommand, out string) {
	if cmd.ResponseURL == "" {
		a.log.Info("slash command finished", zap.String("user", cmd.UserID), zap.String("result", out))
		return
	}
	pctx, cancel := context.WithTimeout(context.Background(), postTimeout)
	defer cancel()
	_, _, _, err := a.api.SendMessageContext(pctx, cmd.ChannelID,
		slack.MsgOptionText(out, false), slack.MsgOptionResponseURL(cmd.ResponseURL, slack.ResponseTypeEphemeral))
	if err != nil {
		a.log.Warn("posting a slash command result to its response_url", zap.Error(err))
	}
}

// formatCommandOutput escapes & < > (the text is mrkdwn), fences multi-line output (tables) and keeps
// it within maxCommandText.
func formatCommandOutput(out string) string {
	out = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(strings.TrimRight(out, "\n"))
	if cut, ok := cutJSON(out, maxCommandJSON); ok {
		out = cut + "\n… (cut; `threadbox admin` on the server shows everything)"
	}
	if strings.Contains(out, "\n") {
		return "```\n" + strings.ReplaceAll(out, "```", "'''") + "\n```"
	}
	return out
}

// cutJSON cuts s to its longest prefix that takes at most limit bytes JSON-encoded, and reports
// whether it cut. Characters are counted as encoding/json writes them: the limit is on bytes sent,
// and a character count lets CJK (3 bytes), emoji (4) or escaped characters (up to 6) run far past it.
// A cut never leaves half an &entity;.
func cutJSON(s string, limit int) (string, bool) {
	n := 0
	for i, r := range s {
		n += jsonLen(r)
		if n > limit {
			cut := s[:i]
			if amp := strings.LastIndexByte(cut, '&'); amp >= 0 && !strings.Contains(cut[amp:], ";") {
				cut = cut[:amp]
			}
			return cut, true
		}
	}
	return s, false
}

// jsonLen is how many bytes encoding/json (HTML escaping on, as json.Marshal) writes for r in a string.
func jsonLen(r rune) int {
	switch {
	case r == '"', r == '\\', r == '\n', r == '\r', r == '\t':
		return 2
	case r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029', r == utf8.RuneError:
		return 6
	}
	return utf8.RuneLen(r)
}
