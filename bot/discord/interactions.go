package discord

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"
	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// commands are the slash commands, registered at start with a bulk overwrite.
func commands() []*discordgo.ApplicationCommand {
	text := func(name, desc string) []*discordgo.ApplicationCommandOption {
		return []*discordgo.ApplicationCommandOption{{Type: discordgo.ApplicationCommandOptionString, Name: name, Description: desc, Required: true}}
	}
	return []*discordgo.ApplicationCommand{
		{Name: "ask", Description: "Ask the agent (in a thread or DM: its session; in a channel: a new thread)", Options: text("prompt", "what to do")},
		{Name: "status", Description: "This thread's sandbox, its queue and the last error"},
		{Name: "stop", Description: "Cancel this thread's running turn"},
		{Name: "reset", Description: "Destroy this thread's sandbox and start fresh"},
		{Name: "use", Description: "Run this thread's sandbox on another enabled provider", Options: text("provider", "docker, daytona, …")},
		{Name: "runtime", Description: "Use another enabled agent runtime in this thread", Options: text("name", "claude-code, shell, …")},
		{Name: "threadbox", Description: "Operator commands (admins only)", Options: text("command", `an admin command, e.g. "sessions"`)},
	}
}

func (a *Adapter) registerCommands(ctx context.Context) error {
	guilds := a.opts.GuildIDs
	if len(guilds) == 0 {
		guilds = []string{""} // global
	}
	for _, g := range guilds {
		if _, err := a.s.ApplicationCommandBulkOverwrite(a.opts.ApplicationID, g, commands(), discordgo.WithContext(ctx)); err != nil {
			return fmt.Errorf("discord: registering slash commands (guild %q): %w", g, err)
		}
	}
	return nil
}

// responder sends an interaction's initial response: the callback route over the gateway, the HTTP
// answer's body for HTTP interactions.
type responder func(ctx context.Context, resp *discordgo.InteractionResponse) error

func (a *Adapter) onInteraction(_ *discordgo.Session, ic *discordgo.InteractionCreate) {
	if ic.Interaction == nil || a.isClosed() {
		return
	}
	// Off the gateway's reader: a slow store for one command must not hold the next one past
	// Discord's 3 seconds (messages stay on the reader, in order; commands carry no order).
	in := ic.Interaction
	a.goBackground(func(base context.Context) {
		ctx, cancel := context.WithTimeout(base, gatewayTimeout)
		defer cancel()
		err := a.acceptInteraction(ctx, in, func(ctx context.Context, resp *discordgo.InteractionResponse) error {
			return a.s.InteractionRespond(in, resp, discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false))
		})
		switch {
		case errors.Is(err, bot.ErrNotAccepted):
			// Nothing was deferred, and the gateway never delivers it again: the response slot is
			// still free for saying so, where Discord would say only "did not respond". (Also
			// while closing: Close waits for this, and the REST client outlives the gateway.)
			p := a.explain("interaction not taken", err, zap.String("interaction", in.ID))
			_ = a.s.InteractionRespond(in, ephemeralReply(notTakenText(p)), discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false))
		case err != nil:
			a.log.Error("interaction not taken", zap.String("interaction", in.ID), zap.Error(err))
		}
	})
}

// InteractionsHandler serves POST /discord/interactions: 401 for a bad, missing or stale signature
// (nothing runs); PING answers {"type":1}; a command is taken and then deferred in the answer's body
// (type 5), or, when it could not be taken, answered privately with the log's ref (503 once closing).
func (a *Adapter) InteractionsHandler() http.Handler {
	return http.HandlerFunc(a.serveInteractions)
}

// signatureWindow bounds a signed timestamp's age: a captured request cannot be replayed later.
const signatureWindow = 5 * time.Minute

func (a *Adapter) verify(h http.Header, body []byte) bool {
	if a.pub == nil {
		return false
	}
	sig, err := hex.DecodeString(h.Get("X-Signature-Ed25519"))
	ts := h.Get("X-Signature-Timestamp")
	if err != nil || len(sig) != ed25519.SignatureSize || ts == "" {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if d := a.opts.Now().Sub(time.Unix(sec, 0)); d > signatureWindow || d < -signatureWindow {
		return false
	}
	return ed25519.Verify(a.pub, append([]byte(ts), body...), sig)
}

func (a *Adapter) serveInteractions(w http.ResponseWriter, r *http.Request) {
	body, ok := bot.ReadPlatformBody(w, r, bot.MaxPlatformBody)
	if !ok {
		return
	}
	if !a.verify(r.Header, body) {
		a.log.Info("refused an interaction with a bad or missing signature", zap.String("remote", r.RemoteAddr))
		http.Error(w, "invalid request signature", http.StatusUnauthorized)
		return
	}
	var in discordgo.Interaction
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, "malformed interaction", http.StatusBadRequest)
		return
	}
	if in.Type == discordgo.InteractionPing {
		writeJSON(w, &discordgo.InteractionResponse{Type: discordgo.InteractionResponsePong})
		return
	}
	if a.isClosed() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	responded := false
	err := a.acceptInteraction(r.Context(), &in, func(_ context.Context, resp *discordgo.InteractionResponse) error {
		responded = true
		writeJSON(w, resp)
		if f, ok := w.(http.Flusher); ok {
			f.Flush() // the deferral must reach Discord before any edit of @original
		}
		return nil
	})
	switch {
	case responded:
	case err != nil && a.isClosed():
		// Closing: this process is going away, and nothing was recorded. A 503 lets a proxy in
		// front of several replicas hand the interaction to one that is not (an answer would end
		// it here); without one, Discord shows its own failure, which is true: try again.
		a.log.Warn("interaction not taken while closing", zap.String("interaction", in.ID), zap.Error(err))
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	case err != nil:
		// Nothing was deferred, and Discord never sends it again: the answer's body is still free
		// for saying so privately, with the log's ref, as the gateway path does. A 503 showed only
		// Discord's "interaction failed", with nothing to quote.
		writeJSON(w, ephemeralReply(notTakenText(a.explain("interaction not taken", err, zap.String("interaction", in.ID)))))
	default:
		writeJSON(w, ephemeralReply("Already received."))
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func ephemeralReply(text string) *discordgo.InteractionResponse {
	return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: text, Flags: discordgo.MessageFlagsEphemeral, AllowedMentions: noMentions}}
}

func deferral(flags discordgo.MessageFlags) *discordgo.InteractionResponse {
	resp := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource}
	if flags != 0 {
		resp.Data = &discordgo.InteractionResponseData{Flags: flags}
	}
	return resp
}

// acceptInteraction takes a slash command: the bot records it first, then it is deferred. It returns
// an error wrapping bot.ErrNotAccepted when the command was not taken (nothing was deferred).
func (a *Adapter) acceptInteraction(ctx context.Context, in *discordgo.Interaction, respond responder) error {
	if in.Type != discordgo.InteractionApplicationCommand {
		return nil
	}
	user := in.User
	if in.Member != nil && in.Member.User != nil {
		user = in.Member.User
	}
	if user == nil {
		return nil
	}
	mark := "int:" + in.ID
	if !a.seen.First(ctx, mark) {
		return nil // replayed after a resume
	}
	data := in.ApplicationCommandData()
	opt := func(name string) string {
		for _, o := range data.Options {
			if o.Name == name && o.Type == discordgo.ApplicationCommandOptionString {
				return o.StringValue()
			}
		}
		return ""
	}
	switch data.Name {
	case "threadbox":
		return a.adminCommand(ctx, in, user, opt("command"), respond)
	case "ask", "status", "stop", "reset", "use", "runtime":
	default:
		return respond(ctx, ephemeralReply("Unknown command."))
	}
	text := data.Name
	switch data.Name {
	case "ask":
		text = opt("prompt")
	case "use":
		text = "use " + strings.Join(strings.Fields(opt("provider")), " ")
	case "runtime":
		text = "runtime " + strings.Join(strings.Fields(opt("name")), " ")
	}
	err := a.takeCommand(ctx, in, user, data.Name, text, respond)
	if err != nil {
		a.seen.Forget(context.WithoutCancel(ctx), mark)
	}
	return err
}

// takeCommand hands /ask, /status, /stop, /reset, /use or /runtime to the bot and defers the interaction.
func (a *Adapter) takeCommand(ctx context.Context, in *discordgo.Interaction, user *discordgo.User, name, text string, respond responder) error {
	pl, parent, err := a.locate(ctx, in.GuildID, in.ChannelID)
	if err != nil {
		return fmt.Errorf("%w: %w", bot.ErrNotAccepted, err)
	}
	// overLimit checks /ask against the rate limit, before a thread is started for it. A slash
	// command is answered by the ephemeral reply itself: no mark needed.
	overLimit := func() (string, bool) {
		if name != "ask" {
			return "", false
		}
		ok, notice, _ := a.limits.Check(ctx, a.opts.RateLimit, "u:"+user.ID, "c:"+in.ChannelID, "<@"+user.ID+">")
		return cmpNotice(notice), !ok
	}
	r := &replier{a: a, channel: in.ChannelID, token: in.Token, ready: make(chan struct{})}
	var key bot.ThreadKey
	thread := ""
	// startLink runs the new thread's link and question (reserved); linked once it did.
	var startLink func(f func(ctx context.Context))
	linked := false
	switch {
	case pl == placeDM:
		key, r.dm = bot.DiscordDM(user.ID), true
	case pl == placeThread:
		key = bot.DiscordThread(in.GuildID, in.ChannelID)
	case pl == placeChannel && name == "ask":
		// The thread, its name and the question posted in it come from the user: the access policy
		// decides before any of it happens, not once the message is handled.
		if g, ok := a.handler.(bot.Gate); ok {
			probe := bot.Message{Thread: bot.DiscordThread(in.GuildID, in.ChannelID), ChannelID: in.ChannelID,
				User: bot.User{ID: user.ID, Name: user.Username}, Text: text}
			if refusal := g.Refusal(probe); refusal != "" {
				return respond(ctx, ephemeralReply(refusal))
			}
		}
		if notice, over := overLimit(); over {
			return respond(ctx, ephemeralReply(notice))
		}
		// The link from @original is promised by the deferral: its place is taken before, so that
		// Close waits for it. Once closing, nothing is started.
		var release func()
		var ok bool
		if startLink, release, ok = a.reserve(); !ok {
			return fmt.Errorf("%w: shutting down", bot.ErrNotAccepted)
		}
		defer func() {
			if !linked {
				release()
			}
		}()
		// A new thread for the question: answered there, linked from @original.
		kind := a.threadTypeIn(in.ChannelID)
		th, err := a.s.ThreadStartComplex(in.ChannelID, &discordgo.ThreadStart{
			Name: threadName(text), AutoArchiveDuration: 1440, Type: kind,
		}, discordgo.WithContext(ctx))
		if err != nil {
			return fmt.Errorf("%w: starting a thread: %w", bot.ErrNotAccepted, err)
		}
		a.channels.Set(th.ID, channelKind(kind, in.ChannelID))
		thread, key = th.ID, bot.DiscordThread(in.GuildID, th.ID)
		r = &replier{a: a, channel: th.ID}
	default:
		return respond(ctx, ephemeralReply("Use /"+name+" inside a thread I answer in, or in a DM with me."))
	}
	msg := bot.Message{Thread: key, ChannelID: r.channel, User: bot.User{ID: user.ID, Name: user.Username},
		Text: text, EventID: "discord:i:" + in.ID, Reply: r.dest()}
	if thread != "" {
		parent = in.ChannelID // the channel allowlist matches the thread by where it started
	}
	msg.ParentChannelID = parent
	// In a thread or a DM, access first (as for a mention): a command the policy refuses goes on to
	// Handle, which counts it and says why, without spending the rate limit.
	if thread == "" && bot.Admits(a.handler, msg) {
		if notice, over := overLimit(); over {
			return respond(ctx, ephemeralReply(notice))
		}
	}
	if err := a.handler.Handle(ctx, msg, r); err != nil {
		if errors.Is(err, bot.ErrNotAccepted) && thread != "" {
			// The thread exists already: it says what it was for and why nothing follows.
			linked = true
			return a.refuseInThread(in, user, text, r, startLink, err)
		}
		if errors.Is(err, bot.ErrNotAccepted) {
			return err
		}
		a.log.Warn("handling a slash command", zap.String("thread", key.String()), zap.Error(err))
	}
	if err := respond(ctx, deferral(0)); err != nil {
		// Too late (Discord's 3 seconds) or refused: the token is of no use, answer in the channel.
		a.log.Warn("deferring an interaction", zap.String("interaction", in.ID), zap.Error(err))
		r.dropToken()
	}
	if r.ready != nil {
		close(r.ready)
	}
	if thread != "" {
		orig := &replier{a: a, channel: in.ChannelID, token: in.Token}
		linked = true
		startLink(func(ctx context.Context) {
			if err := orig.Post(ctx, fmt.Sprintf("Started <#%s> for %q; I answer there.", thread, oneLine(text, 80))); err != nil {
				a.log.Warn("linking the new thread", zap.Error(err))
			}
			if err := r.Post(ctx, fmt.Sprintf("<@%s> asked: %s", user.ID, oneLine(text, 1800))); err != nil {
				a.log.Warn("posting the question into its thread", zap.Error(err))
			}
		})
	}
	return nil
}

// refuseInThread posts, in the thread started for a /ask the bot then did not take, the question
// and that it was not taken (start runs it, on the place reserved for the thread's link). The error
// returned carries the refusal's ref, so the interaction's answer gives the same one.
func (a *Adapter) refuseInThread(in *discordgo.Interaction, user *discordgo.User, text string, r *replier,
	start func(f func(ctx context.Context)), err error) error {
	p := bot.Explain(a.log, "interaction not taken", err, zap.String("interaction", in.ID))
	start(func(ctx context.Context) {
		said := fmt.Sprintf("<@%s> asked: %s\n\n%s", user.ID, oneLine(text, 1500), notTakenText(p))
		if err := r.Post(ctx, said); err != nil {
			a.log.Warn("telling a new thread its question was not taken", zap.Error(err))
		}
	})
	return &explained{p: p, err: err}
}

// explained is an error already logged and explained under p.Ref: its answer uses that ref.
type explained struct {
	p   bot.Problem
	err error
}

func (e *explained) Error() string { return e.err.Error() }
func (e *explained) Unwrap() error { return e.err }

// explain is err's problem for the user: the one already given for it, else a new one, logged.
func (a *Adapter) explain(msg string, err error, fields ...zap.Field) bot.Problem {
	if ex, ok := errors.AsType[*explained](err); ok {
		return ex.p
	}
	return bot.Explain(a.log, msg, err, fields...)
}

func cmpNotice(notice string) string {
	if notice == "" {
		return "You are over the message limit for now; please try again in a minute."
	}
	return notice
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n-1]) + "…"
	}
	return s
}

// maxCommandText keeps an admin reply within one message, fenced.
const maxCommandText = maxMessage - 100

// adminCommand runs /threadbox command:<text> as "discord:<user id>" (refused and audited by the
// admin commands for anyone not in admin.users). The reply is ephemeral.
func (a *Adapter) adminCommand(ctx context.Context, in *discordgo.Interaction, user *discordgo.User, text string, respond responder) error {
	if a.opts.Admin == nil {
		return respond(ctx, ephemeralReply("Admin commands are not configured on this bot."))
	}
	argv := strings.Fields(text)
	if len(argv) > 0 && strings.EqualFold(argv[0], "admin") {
		argv = argv[1:]
	}
	// The answer's place is taken before the deferral: once deferred it must run, Close or not.
	start, release, ok := a.reserve()
	if !ok {
		return fmt.Errorf("%w: shutting down", bot.ErrNotAccepted)
	}
	if err := respond(ctx, deferral(discordgo.MessageFlagsEphemeral)); err != nil {
		release()
		return fmt.Errorf("%w: deferring: %w", bot.ErrNotAccepted, err)
	}
	r := &replier{a: a, channel: in.ChannelID, token: in.Token, ephemeral: true}
	actor := "discord:" + user.ID
	start(func(ctx context.Context) {
		out, _ := a.opts.Admin.Run(ctx, actor, argv)
		err := r.Post(ctx, formatCommandOutput(out))
		if errors.Is(err, bot.ErrNoPrivate) {
			// The token expired: the output is not for the channel, but the user is told.
			plain := &replier{a: a, channel: in.ChannelID}
			err = plain.Post(ctx, AdminExpiredText)
		}
		if err != nil {
			a.log.Warn("posting an admin command's result", zap.Error(err))
		}
	})
	return nil
}

// AdminExpiredText replaces an admin command's output once its interaction has expired: only the
// user who ran it was to see the output, and the channel is seen by everyone.
const AdminExpiredText = "An admin command's output could not be shown privately (its interaction expired); run /threadbox again."

// formatCommandOutput fences multi-line output (tables) and keeps it within one message.
func formatCommandOutput(out string) string {
	out = strings.TrimRight(out, "\n")
	if utf8.RuneCountInString(out) > maxCommandText {
		out = string([]rune(out)[:maxCommandText]) + "\n… (cut; `threadbox admin` on the server shows everything)"
	}
	if strings.Contains(out, "\n") {
		return "```\n" + strings.ReplaceAll(out, "```", "'''") + "\n```"
	}
	return out
}
