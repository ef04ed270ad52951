package discordfake

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// What users do: messages (mentions, DMs, thread replies) dispatched as MESSAGE_CREATE, and slash
// commands as interactions (over the gateway or as signed HTTP requests).

// MessageOption adjusts a user message.
type MessageOption func(*Message)

// WithAttachment attaches a file, served from the fake's host.
func WithAttachment(name string, data []byte) MessageOption {
	return func(m *Message) {
		m.Attachments = append(m.Attachments, Attachment{Filename: name, Size: int64(len(data)), Data: data, ContentType: "text/plain"})
	}
}

// Person returns a human user.
func Person(id string) User { return User{ID: id, Username: "user" + id} }

// GuildChannel makes sure a guild text channel exists.
func (s *Server) GuildChannel(guildID, channelID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ensureChannelLocked(Channel{ID: channelID, Type: ChannelGuildText, GuildID: guildID, Name: "general"})
}

// NewsChannel makes sure a guild announcement (news) channel exists.
func (s *Server) NewsChannel(guildID, channelID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ensureChannelLocked(Channel{ID: channelID, Type: ChannelNews, GuildID: guildID, Name: "announcements"})
}

// Mention has user post "<@bot> text" in a guild text channel (created if new), dispatched as
// MESSAGE_CREATE.
func (s *Server) Mention(guildID, channelID string, user User, text string, opts ...MessageOption) Message {
	s.GuildChannel(guildID, channelID)
	return s.Say(channelID, user, "<@"+s.opts.BotUserID+"> "+text, append(opts, mentionBot(s))...)
}

func mentionBot(s *Server) MessageOption {
	return func(m *Message) { m.Mentions = append(m.Mentions, s.BotUser()) }
}

// MentionIn has user mention the bot in an existing channel or thread.
func (s *Server) MentionIn(channelID string, user User, text string, opts ...MessageOption) Message {
	return s.Say(channelID, user, "<@"+s.opts.BotUserID+"> "+text, append(opts, mentionBot(s))...)
}

// DMChannel returns the DM channel between the bot and user (created if new).
func (s *Server) DMChannel(user User) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.channels {
		if c.Type == ChannelDM && len(c.Recipients) == 1 && c.Recipients[0].ID == user.ID {
			return c.ID
		}
	}
	return s.ensureChannelLocked(Channel{ID: s.idLocked(), Type: ChannelDM, Recipients: []User{user}}).ID
}

// DM has user send text to the bot in their DM channel.
func (s *Server) DM(user User, text string, opts ...MessageOption) Message {
	return s.Say(s.DMChannel(user), user, text, opts...)
}

// Say posts a message as user in an existing channel and dispatches MESSAGE_CREATE.
func (s *Server) Say(channelID string, user User, content string, opts ...MessageOption) Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channelID]
	if c == nil {
		panic(fmt.Sprintf("discordfake: Say in unknown channel %s", channelID))
	}
	m := &Message{ID: s.idLocked(), ChannelID: channelID, GuildID: c.GuildID, Author: user, Content: content,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}, Attachments: []Attachment{}, At: time.Now()}
	for _, o := range opts {
		o(m)
	}
	m.Attachments = s.attachLocked(channelID, m.Attachments)
	s.messages[channelID] = append(s.messages[channelID], m)
	d := map[string]any{}
	_ = json.Unmarshal(mustJSON(m), &d)
	if c.GuildID != "" {
		d["member"] = map[string]any{"roles": []string{}, "joined_at": m.Timestamp}
	}
	s.dispatchOrHoldLocked("MESSAGE_CREATE", d)
	return copyMessage(m)
}

func (s *Server) dispatchOrHoldLocked(t string, d any) {
	if s.gw.current == nil {
		s.gw.pending = append(s.gw.pending, frame{T: &t, D: mustJSON(d)})
		s.notifyLocked()
		return
	}
	s.dispatchLocked(s.gw.current, t, d)
}

// Callback is an interaction's initial response.
type Callback struct {
	Type    int
	Flags   int
	Content string
	At      time.Time
}

// Interaction is a slash command invocation and what the bot did with it.
type Interaction struct {
	ID, Token, ChannelID, GuildID string
	User                          User
	Name                          string
	Options                       map[string]string
	Created                       time.Time
	Callbacks                     []Callback
	// OriginalID is the id of the response message (after a type 4 or 5 callback).
	OriginalID string
	// FollowupIDs are the ids of follow-up messages.
	FollowupIDs []string
	// TokenExpired is set by ExpireToken: webhook calls with the token answer 401 (50027).
	TokenExpired bool
	payload      []byte
}

// Slash builds a slash command invocation in a channel, thread or DM. Send it with
// DispatchInteraction (gateway) or PostInteraction (HTTP).
func (s *Server) Slash(channelID string, user User, name string, options map[string]string) *Interaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[channelID]
	if c == nil {
		panic(fmt.Sprintf("discordfake: Slash in unknown channel %s", channelID))
	}
	in := &Interaction{ID: s.idLocked(), Token: "tok" + s.idLocked(), ChannelID: channelID, GuildID: c.GuildID,
		User: user, Name: name, Options: options}
	var opts []map[string]any
	for k, v := range options {
		opts = append(opts, map[string]any{"name": k, "type": 3, "value": v})
	}
	p := map[string]any{
		"id": in.ID, "application_id": s.opts.AppID, "type": 2, "token": in.Token, "version": 1,
		"channel_id": channelID, "channel": c, "app_permissions": "0", "locale": "en-US",
		"data": map[string]any{"id": s.idLocked(), "name": name, "type": 1, "options": opts},
	}
	if c.GuildID != "" {
		p["guild_id"] = c.GuildID
		p["member"] = map[string]any{"user": user, "roles": []string{}, "permissions": "0", "joined_at": time.Now().UTC().Format(time.RFC3339)}
	} else {
		p["user"] = user
	}
	in.payload = mustJSON(p)
	s.interactions[in.ID] = in
	s.byToken[in.Token] = in
	return in
}

// DispatchInteraction sends the invocation as INTERACTION_CREATE on the gateway; the 3-second
// deadline for its callback starts now.
func (s *Server) DispatchInteraction(in *Interaction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in.Created = time.Now()
	s.dispatchOrHoldLocked("INTERACTION_CREATE", json.RawMessage(in.payload))
}

// Signing adjusts how PostInteraction signs a request.
type Signing func(h http.Header)

// Unsigned sends no signature headers.
func Unsigned() Signing {
	return func(h http.Header) { h.Del("X-Signature-Ed25519"); h.Del("X-Signature-Timestamp") }
}

// BadSignature sends a well-formed signature made with another key.
func BadSignature() Signing {
	return func(h http.Header) {
		h.Set("X-Signature-Ed25519", hex.EncodeToString(make([]byte, ed25519.SignatureSize)))
	}
}

// HTTPResult is the bot's answer to an HTTP interaction.
type HTTPResult struct {
	Status int
	Body   []byte
	// Took is from sending to the full answer.
	Took time.Duration
}

// PostInteraction sends the invocation to the bot's interactions URL, signed like Discord does
// (Ed25519 over timestamp + body). A 2xx answer's body is recorded as the interaction's callback.
func (s *Server) PostInteraction(ctx context.Context, url string, in *Interaction, signing ...Signing) (HTTPResult, error) {
	s.mu.Lock()
	in.Created = time.Now()
	body := in.payload
	s.mu.Unlock()
	return s.postSigned(ctx, url, body, in, signing)
}

// Ping sends an HTTP PING (type 1), as Discord does when the interactions URL is saved.
func (s *Server) Ping(ctx context.Context, url string, signing ...Signing) (HTTPResult, error) {
	body := mustJSON(map[string]any{"id": "1", "application_id": s.opts.AppID, "type": 1, "token": "ping", "version": 1})
	return s.postSigned(ctx, url, body, nil, signing)
}

func (s *Server) postSigned(ctx context.Context, url string, body []byte, in *Interaction, signing []Signing) (HTTPResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return HTTPResult{}, err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Signature-Timestamp", ts)
	req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(s.priv, append([]byte(ts), body...))))
	for _, sg := range signing {
		sg(req.Header)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return HTTPResult{}, fmt.Errorf("discordfake: posting an interaction: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	res := HTTPResult{Status: resp.StatusCode, Body: data, Took: time.Since(start)}
	if err != nil {
		return res, fmt.Errorf("discordfake: reading the interaction answer: %w", err)
	}
	if in != nil && resp.StatusCode/100 == 2 {
		var cb callbackBody
		if json.Unmarshal(data, &cb) == nil {
			s.mu.Lock()
			s.answerLocked(in, cb)
			s.mu.Unlock()
		}
	}
	return res, nil
}

// ExpireInteraction moves an interaction's creation back past the callback deadline.
func (s *Server) ExpireInteraction(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.interactions[id]; in != nil {
		in.Created = time.Now().Add(-s.opts.InteractionDeadline - time.Second)
	}
}

// ExpireToken ends an interaction's token as Discord does after 15 minutes: editing @original and
// follow-ups answer 401 Invalid Webhook Token (50027).
func (s *Server) ExpireToken(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.interactions[id]; in != nil {
		in.TokenExpired = true
	}
}

// Interaction returns the interaction's record.
func (s *Server) Interaction(id string) (Interaction, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.interactions[id]
	if !ok {
		return Interaction{}, false
	}
	c := *in
	c.Callbacks = append([]Callback(nil), in.Callbacks...)
	c.FollowupIDs = append([]string(nil), in.FollowupIDs...)
	return c, true
}

// callbackBody is an interaction response.
type callbackBody struct {
	Type int `json:"type"`
	Data *struct {
		Content string `json:"content"`
		Flags   int    `json:"flags"`
	} `json:"data"`
}

// answerLocked records an initial response; types 4 and 5 create the original message (Discord
// shows "thinking…" for 5). Callers hold mu.
func (s *Server) answerLocked(in *Interaction, cb callbackBody) {
	c := Callback{Type: cb.Type, At: time.Now()}
	if cb.Data != nil {
		c.Content, c.Flags = cb.Data.Content, cb.Data.Flags
	}
	in.Callbacks = append(in.Callbacks, c)
	if cb.Type == 4 || cb.Type == 5 {
		content := c.Content
		m, _, _ := s.newMessageLocked(in.ChannelID, outgoing{Content: &content, Flags: c.Flags})
		if m == nil { // a deferred response has no content yet
			m = &Message{ID: s.idLocked(), ChannelID: in.ChannelID, GuildID: in.GuildID, Author: s.BotUser(),
				Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}, Attachments: []Attachment{},
				Flags: c.Flags, At: time.Now()}
			s.messages[in.ChannelID] = append(s.messages[in.ChannelID], m)
		}
		m.Interaction = in.Token
		in.OriginalID = m.ID
	}
	s.notifyLocked()
}

func (s *Server) callback(w http.ResponseWriter, r *http.Request) {
	var cb callbackBody
	if err := json.NewDecoder(r.Body).Decode(&cb); err != nil {
		writeError(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.interactions[r.PathValue("id")]
	switch {
	case in == nil || in.Token != r.PathValue("token") || in.Created.IsZero() ||
		time.Since(in.Created) > s.opts.InteractionDeadline:
		writeError(w, http.StatusNotFound, codeUnknownInteraction, "Unknown interaction")
		return
	case len(in.Callbacks) > 0:
		writeError(w, http.StatusBadRequest, codeAlreadyAcked, "Interaction has already been acknowledged.")
		return
	}
	s.answerLocked(in, cb)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) webhookLocked(w http.ResponseWriter, r *http.Request) *Interaction {
	in := s.byToken[r.PathValue("token")]
	if in == nil || r.PathValue("app") != s.opts.AppID {
		writeError(w, http.StatusNotFound, codeUnknownWebhook, "Unknown Webhook")
		return nil
	}
	if in.TokenExpired {
		writeError(w, http.StatusUnauthorized, codeInvalidWebhookToken, "Invalid Webhook Token")
		return nil
	}
	return in
}

func (s *Server) editOriginal(w http.ResponseWriter, r *http.Request) {
	o, ok := s.outgoingOr400(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.webhookLocked(w, r)
	if in == nil {
		return
	}
	m := s.findLocked(in.ChannelID, in.OriginalID)
	if m == nil {
		writeError(w, http.StatusNotFound, codeUnknownMessage, "Unknown Message")
		return
	}
	if !s.editLocked(w, m, o) {
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) followup(w http.ResponseWriter, r *http.Request) {
	o, ok := s.outgoingOr400(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.webhookLocked(w, r)
	if in == nil {
		return
	}
	if len(in.Callbacks) == 0 {
		writeError(w, http.StatusNotFound, codeUnknownMessage, "Unknown Message")
		return
	}
	m, code, msg := s.newMessageLocked(in.ChannelID, o)
	if m == nil {
		writeError(w, http.StatusBadRequest, code, msg)
		return
	}
	m.Interaction = in.Token
	in.FollowupIDs = append(in.FollowupIDs, m.ID)
	s.notifyLocked()
	if r.URL.Query().Get("wait") != "true" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, m)
}
