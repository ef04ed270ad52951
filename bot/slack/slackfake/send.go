package slackfake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is an Events API event_callback the fake built, ready to deliver over HTTP or Socket Mode.
type Event struct {
	// ID is the event_id, the same on every retry of this event.
	ID       string
	Type     string
	Channel  string
	TS       string
	ThreadTS string
	User     string
	Text     string
	// Body is the event_callback JSON, exactly what Slack POSTs (or wraps in an envelope).
	Body []byte
}

// MsgOption adjusts a user message built by Mention, DM or ChannelMessage.
type MsgOption func(*msgSpec)

type msgSpec struct {
	thread string
	files  []UserFile
	raw    bool
	fields map[string]any
}

// InThread makes the message a reply in the thread whose root has ts threadTS.
func InThread(threadTS string) MsgOption { return func(m *msgSpec) { m.thread = threadTS } }

// WithFiles attaches files (from AddUserFile); the message gets Slack's file_share subtype.
func WithFiles(files ...UserFile) MsgOption { return func(m *msgSpec) { m.files = files } }

// WithFields sets fields of the inner event as Slack would for a case the fake does not model (a
// Slack Connect sender's user_team, team and source_team); a nil value removes the field.
func WithFields(fields map[string]any) MsgOption { return func(m *msgSpec) { m.fields = fields } }

// RawText sends the text as already-formatted Slack markup (no escaping of & < >).
func RawText() MsgOption { return func(m *msgSpec) { m.raw = true } }

// Escape escapes text the way Slack does for what a user typed: &, < and >.
func Escape(text string) string { return escaper.Replace(text) }

// escaper is built once: a Replacer builds its tables on first use, per Replacer.
var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Mention records a user message that mentions the bot ("<@BOT> text") and returns its app_mention.
func (s *Server) Mention(channel, user, text string, opts ...MsgOption) Event {
	return s.userMessage("app_mention", "", channel, user, text, true, opts)
}

// DM records a message the user sends in their DM with the bot and returns its message.im event.
func (s *Server) DM(user, text string, opts ...MsgOption) Event {
	return s.userMessage("message", "im", DMChannel(user), user, text, false, opts)
}

// ChannelMessage records a plain channel message (no mention) and returns its message.channels event.
func (s *Server) ChannelMessage(channel, user, text string, opts ...MsgOption) Event {
	return s.userMessage("message", "channel", channel, user, text, false, opts)
}

func (s *Server) userMessage(typ, channelType, channel, user, text string, mention bool, opts []MsgOption) Event {
	var spec msgSpec
	for _, o := range opts {
		o(&spec)
	}
	if !spec.raw {
		text = Escape(text)
	}
	if mention {
		text = "<@" + s.opts.BotUserID + "> " + text
	}
	s.mu.Lock()
	m := &Message{Channel: channel, TS: s.nextTSLocked(), ThreadTS: spec.thread, User: user, Text: text}
	for _, f := range spec.files {
		m.Files = append(m.Files, f.ID)
	}
	s.messages[channel+"/"+m.TS] = m
	s.seq++
	clientMsgID := fmt.Sprintf("c0ffee00-0000-4000-8000-%012x", s.seq)
	s.changedLocked()
	s.mu.Unlock()

	inner := map[string]any{
		"type": typ, "user": user, "text": text, "ts": m.TS, "channel": channel, "event_ts": m.TS,
		"team": s.opts.TeamID, "client_msg_id": clientMsgID,
		"blocks": richText(s.opts.BotUserID, text, mention),
	}
	if channelType != "" {
		inner["channel_type"] = channelType
	}
	if spec.thread != "" {
		inner["thread_ts"] = spec.thread
		inner["parent_user_id"] = user
	}
	if len(spec.files) > 0 {
		inner["files"] = spec.files
		inner["upload"] = false
		if typ == "message" {
			inner["subtype"] = "file_share"
		}
	}
	for k, v := range spec.fields {
		if v == nil {
			delete(inner, k)
		} else {
			inner[k] = v
		}
	}
	ev := s.Callback(inner)
	ev.Channel, ev.TS, ev.ThreadTS, ev.User, ev.Text = channel, m.TS, spec.thread, user, text
	return ev
}

// richText is the rich_text block Slack adds to every user message; the bot must cope with it.
func richText(bot, text string, mention bool) []any {
	var els []any
	if mention {
		els = append(els, map[string]any{"type": "user", "user_id": bot})
		text = strings.TrimPrefix(text, "<@"+bot+">")
	}
	els = append(els, map[string]any{"type": "text", "text": text})
	return []any{map[string]any{"type": "rich_text", "block_id": "Fk1", "elements": []any{
		map[string]any{"type": "rich_text_section", "elements": els},
	}}}
}

// Again wraps the same message as another event (a new event_id): Slack sends both app_mention and
// message.channels for one mention when both are subscribed, and sometimes repeats an event with a
// fresh id.
func (s *Server) Again(ev Event, typ string) Event {
	var outer map[string]any
	_ = json.Unmarshal(ev.Body, &outer)
	inner, _ := outer["event"].(map[string]any)
	inner["type"] = typ
	if typ == "message" {
		if _, ok := inner["channel_type"]; !ok {
			inner["channel_type"] = "channel"
		}
	}
	out := s.Callback(inner)
	out.Channel, out.TS, out.ThreadTS, out.User, out.Text = ev.Channel, ev.TS, ev.ThreadTS, ev.User, ev.Text
	return out
}

// BotEcho is the message event Slack sends about one of the bot's own posts (when the app subscribes
// to message.channels): the bot must ignore it.
func (s *Server) BotEcho(m Message) Event {
	inner := map[string]any{
		"type": "message", "subtype": "bot_message", "user": s.opts.BotUserID, "bot_id": s.opts.BotID,
		"text": m.Text, "ts": m.TS, "channel": m.Channel, "event_ts": m.TS, "channel_type": "channel",
	}
	if m.ThreadTS != "" {
		inner["thread_ts"] = m.ThreadTS
	}
	return s.Callback(inner)
}

// Callback wraps an inner event in an event_callback with a new event_id.
func (s *Server) Callback(inner map[string]any) Event {
	s.mu.Lock()
	id := s.nextIDLocked("Ev")
	s.mu.Unlock()
	outer := map[string]any{
		"token": "fake-verification-token", "team_id": s.opts.TeamID, "context_team_id": s.opts.TeamID,
		"api_app_id": s.opts.AppID, "event": inner, "type": "event_callback", "event_id": id,
		"event_time": time.Now().Unix(), "event_context": "4-fake-" + id, "is_ext_shared_channel": false,
		"authorizations": []any{map[string]any{
			"enterprise_id": nil, "team_id": s.opts.TeamID, "user_id": s.opts.BotUserID,
			"is_bot": true, "is_enterprise_install": false,
		}},
	}
	body, _ := json.Marshal(outer)
	typ, _ := inner["type"].(string)
	return Event{ID: id, Type: typ, Body: body}
}

// Sign computes Slack's request signature: v0=hex(HMAC-SHA256(secret, "v0:<ts>:<body>")).
func Sign(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// DeliverOption adjusts one signed request.
type DeliverOption func(*delivery)

type delivery struct {
	retryNum    int
	retryReason string
	at          time.Time
	secret      string
	signature   *string
	noTimestamp bool
}

// Retry marks the request as Slack's retry number n (X-Slack-Retry-Num) for reason
// (X-Slack-Retry-Reason: http_timeout, http_error, …).
func Retry(n int, reason string) DeliverOption {
	return func(d *delivery) { d.retryNum, d.retryReason = n, reason }
}

// SignedAt signs with timestamp t instead of now (stale-request tests).
func SignedAt(t time.Time) DeliverOption { return func(d *delivery) { d.at = t } }

// SignWith signs with another secret (forged-request tests).
func SignWith(secret string) DeliverOption { return func(d *delivery) { d.secret = secret } }

// Signature sends sig as X-Slack-Signature ("" sends no signature header at all).
func Signature(sig string) DeliverOption { return func(d *delivery) { d.signature = &sig } }

// NoTimestamp leaves out X-Slack-Request-Timestamp.
func NoTimestamp() DeliverOption { return func(d *delivery) { d.noTimestamp = true } }

// Result is the bot's answer to a request the fake sent.
type Result struct {
	Status  int
	Header  http.Header
	Body    []byte
	Latency time.Duration
}

// Deliver POSTs ev to the bot's Events API URL, signed as Slack signs it.
func (s *Server) Deliver(ctx context.Context, eventsURL string, ev Event, opts ...DeliverOption) (Result, error) {
	return s.PostSigned(ctx, eventsURL, "application/json", ev.Body, opts...)
}

// URLVerification sends the challenge Slack sends when the Request URL is saved.
func (s *Server) URLVerification(ctx context.Context, eventsURL, challenge string) (Result, error) {
	body, _ := json.Marshal(map[string]any{"token": "fake-verification-token", "challenge": challenge, "type": "url_verification"})
	return s.PostSigned(ctx, eventsURL, "application/json", body)
}

// client sends the fake's requests; a large idle pool lets a benchmark keep connections warm.
var client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute,
}}

// PostSigned POSTs any body with Slack's signature headers.
func (s *Server) PostSigned(ctx context.Context, target, contentType string, body []byte, opts ...DeliverOption) (Result, error) {
	d := delivery{at: time.Now(), secret: s.opts.SigningSecret}
	for _, o := range opts {
		o(&d)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return Result{}, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	ts := d.at.Unix()
	if !d.noTimestamp {
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
	}
	sig := Sign(d.secret, ts, body)
	if d.signature != nil {
		sig = *d.signature
	}
	if sig != "" {
		req.Header.Set("X-Slack-Signature", sig)
	}
	if d.retryNum > 0 {
		req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(d.retryNum))
		req.Header.Set("X-Slack-Retry-Reason", d.retryReason)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return Result{Status: resp.StatusCode, Header: resp.Header, Body: out, Latency: time.Since(start)}, err
}

// SlashCommand is a slash command invocation.
type SlashCommand struct {
	Command   string // default "/threadbox"
	Text      string
	UserID    string
	UserName  string
	ChannelID string
}

// SlashCommand POSTs a slash command to the bot's command URL, form-encoded and signed like Slack.
// Its response_url points back at the fake (see ResponsePosts).
func (s *Server) SlashCommand(ctx context.Context, commandsURL string, cmd SlashCommand, opts ...DeliverOption) (Result, error) {
	form := s.commandForm(cmd)
	return s.PostSigned(ctx, commandsURL, "application/x-www-form-urlencoded", []byte(form.Encode()), opts...)
}

// SlashCommandBody is the form body SlashCommand would send, for sending one command twice with
// PostSigned (replay tests).
func (s *Server) SlashCommandBody(cmd SlashCommand) []byte {
	return []byte(s.commandForm(cmd).Encode())
}

func (s *Server) commandForm(cmd SlashCommand) url.Values {
	if cmd.Command == "" {
		cmd.Command = "/threadbox"
	}
	if cmd.ChannelID == "" {
		cmd.ChannelID = "C0GENERAL"
	}
	if cmd.UserName == "" {
		cmd.UserName = strings.ToLower(cmd.UserID)
	}
	s.mu.Lock()
	id := s.nextIDLocked("cmd")
	s.mu.Unlock()
	return url.Values{
		"token": {"fake-verification-token"}, "team_id": {s.opts.TeamID}, "team_domain": {"fake"},
		"channel_id": {cmd.ChannelID}, "channel_name": {"general"}, "user_id": {cmd.UserID},
		"user_name": {cmd.UserName}, "command": {cmd.Command}, "text": {cmd.Text},
		"api_app_id": {s.opts.AppID}, "is_enterprise_install": {"false"},
		"response_url": {s.srv.URL + "/commands/" + id}, "trigger_id": {id + ".trigger"},
	}
}
