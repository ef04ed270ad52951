// Package discordfake is a fake of the parts of Discord the bot speaks to, faithful on the wire: the
// REST API under /api/v{n}/ (messages with multipart uploads, edits, reactions, typing, threads,
// slash command registration, interaction callbacks and webhooks, GET /gateway/bot), the gateway
// over a WebSocket (Hello, Identify, Ready, heartbeats and ACKs, dispatches with sequence numbers, op 7
// Reconnect, op 9 Invalid Session, Resume with replay of missed dispatches) and signed HTTP
// interactions. Errors have Discord's shapes: 401/403/404 JSON bodies with a code, 429 with
// retry_after and the X-RateLimit-* headers.
//
// It records everything (messages and their edits, uploads, reactions, threads, callbacks, commands,
// requests) for tests to assert on. It knows nothing of Threadbox.
package discordfake

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure the fake.
type Options struct {
	// BotToken is the token the bot must present (default "fake-discord-token").
	BotToken string
	// AppID is the application id (default "900000000000000001").
	AppID string
	// BotUserID is the bot user's id (default "900000000000000002").
	BotUserID string
	// HeartbeatInterval is sent in Hello (default 41.25 s, Discord's usual).
	HeartbeatInterval time.Duration
	// InteractionDeadline is how long an interaction may wait for its callback (default 3 s).
	InteractionDeadline time.Duration
}

// Attachment is a file sent with a message.
type Attachment struct {
	ID          string `json:"id"`
	Filename    string `json:"filename"`
	Size        int64  `json:"size"`
	URL         string `json:"url"`
	ContentType string `json:"content_type,omitempty"`
	// Data is what was uploaded (not on the wire).
	Data []byte `json:"-"`
}

// User is a Discord user.
type User struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Bot      bool   `json:"bot,omitempty"`
}

// Message is a message as Discord stores it, with the fake's records.
type Message struct {
	ID          string       `json:"id"`
	ChannelID   string       `json:"channel_id"`
	GuildID     string       `json:"guild_id,omitempty"`
	Author      User         `json:"author"`
	Content     string       `json:"content"`
	Timestamp   string       `json:"timestamp"`
	Mentions    []User       `json:"mentions"`
	Attachments []Attachment `json:"attachments"`
	Type        int          `json:"type"`
	Flags       int          `json:"flags,omitempty"`
	// Edits are the contents it had before each edit, oldest first (not on the wire).
	Edits []string `json:"-"`
	// Reactions are the bot's current reactions (not on the wire).
	Reactions []string `json:"-"`
	// Interaction is the token of the interaction it answers, if any (not on the wire).
	Interaction string `json:"-"`
	// At is when it was created or last edited (not on the wire).
	At time.Time `json:"-"`
}

// Channel types the fake uses (Discord's numbers).
const (
	ChannelGuildText    = 0
	ChannelDM           = 1
	ChannelPublicThread = 11
	// An announcement (news) channel's threads are announcement threads, never public ones.
	ChannelNews       = 5
	ChannelNewsThread = 10
)

// Channel is a channel, DM or thread.
type Channel struct {
	ID       string `json:"id"`
	Type     int    `json:"type"`
	GuildID  string `json:"guild_id,omitempty"`
	ParentID string `json:"parent_id,omitempty"`
	Name     string `json:"name,omitempty"`
	OwnerID  string `json:"owner_id,omitempty"`
	// Recipients are a DM's other party.
	Recipients []User `json:"recipients,omitempty"`
	// FromMessage is the message a thread was started from, "" for a thread started bare (not on
	// the wire).
	FromMessage string `json:"-"`
}

// Request is one REST call, as recorded.
type Request struct {
	Method, Path string
	// Status is what the fake answered.
	Status int
	At     time.Time
}

// Server is the fake. It is safe for concurrent use.
type Server struct {
	opts Options
	srv  *httptest.Server
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey

	// mu protects everything below, and is held for no I/O.
	mu           sync.Mutex
	nextID       uint64
	channels     map[string]*Channel
	messages     map[string][]*Message // by channel
	interactions map[string]*Interaction
	byToken      map[string]*Interaction
	commands     map[string][]json.RawMessage // by "global" or guild id
	typing       map[string]int
	requests     []Request
	limits       []*rateRule
	gw           gateway
	// changed is closed and replaced whenever anything is recorded, for Wait.
	changed chan struct{}
}

// New starts a fake on a local port.
func New(opts Options) *Server {
	if opts.BotToken == "" {
		opts.BotToken = "fake-discord-token"
	}
	if opts.AppID == "" {
		opts.AppID = "900000000000000001"
	}
	if opts.BotUserID == "" {
		opts.BotUserID = "900000000000000002"
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 41250 * time.Millisecond
	}
	if opts.InteractionDeadline <= 0 {
		opts.InteractionDeadline = 3 * time.Second
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("discordfake: generating the interactions key: %v", err)) // crypto/rand does not fail
	}
	s := &Server{
		opts: opts, priv: priv, pub: pub, nextID: 1100000000000000000,
		channels: map[string]*Channel{}, messages: map[string][]*Message{},
		interactions: map[string]*Interaction{}, byToken: map[string]*Interaction{},
		commands: map[string][]json.RawMessage{}, typing: map[string]int{}, changed: make(chan struct{}),
	}
	s.gw.init()
	s.srv = httptest.NewServer(s.routes())
	return s
}

// Close stops the fake and drops every gateway connection.
func (s *Server) Close() {
	s.DropConnections()
	s.srv.Close()
}

// APIURL is the REST base the bot is pointed at (discord.api_url): http://127.0.0.1:port/api/v10.
func (s *Server) APIURL() string { return s.srv.URL + "/api/v10" }

// URL is the fake's root.
func (s *Server) URL() string { return s.srv.URL }

// Host is the fake's host:port.
func (s *Server) Host() string { return s.srv.Listener.Addr().String() }

// Options returns the options in effect (defaults filled in).
func (s *Server) Options() Options { return s.opts }

// PublicKey is the hex Ed25519 key HTTP interactions are signed with (discord.public_key).
func (s *Server) PublicKey() string { return hex.EncodeToString(s.pub) }

// BotUser is the bot's user.
func (s *Server) BotUser() User {
	return User{ID: s.opts.BotUserID, Username: "threadbox", Bot: true}
}

// id returns a fresh snowflake. Callers hold mu.
func (s *Server) idLocked() string {
	s.nextID++
	return strconv.FormatUint(s.nextID, 10)
}

// notifyLocked wakes Wait. Callers hold mu.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Wait blocks until cond (evaluated after each recorded change) holds, or ctx ends.
func (s *Server) Wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("discordfake: condition not met: %w", ctx.Err())
		}
	}
}

// Messages returns copies of a channel's messages, oldest first.
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages[channelID] {
		out = append(out, copyMessage(m))
	}
	return out
}

// BotMessages returns the bot's messages in a channel, oldest first.
func (s *Server) BotMessages(channelID string) []Message {
	var out []Message
	for _, m := range s.Messages(channelID) {
		if m.Author.ID == s.opts.BotUserID {
			out = append(out, m)
		}
	}
	return out
}

// Message returns one message.
func (s *Server) Message(channelID, messageID string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.findLocked(channelID, messageID); m != nil {
		return copyMessage(m), true
	}
	return Message{}, false
}

// DeleteMessage deletes a message, as a moderator may (an interaction's @original included).
func (s *Server) DeleteMessage(channelID, messageID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages[channelID] = slices.DeleteFunc(s.messages[channelID], func(m *Message) bool { return m.ID == messageID })
	s.notifyLocked()
}

func copyMessage(m *Message) Message {
	c := *m
	c.Attachments = append([]Attachment(nil), m.Attachments...)
	c.Edits = append([]string(nil), m.Edits...)
	c.Reactions = append([]string(nil), m.Reactions...)
	return c
}

// Reactions returns the bot's current reactions on a message.
func (s *Server) Reactions(channelID, messageID string) []string {
	m, _ := s.Message(channelID, messageID)
	return m.Reactions
}

// Channel returns a channel (a thread, a DM).
func (s *Server) Channel(id string) (Channel, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.channels[id]
	if !ok {
		return Channel{}, false
	}
	return *c, true
}

// Threads returns the threads under a channel, in creation order.
func (s *Server) Threads(parentID string) []Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Channel
	for _, c := range s.channels {
		if (c.Type == ChannelPublicThread || c.Type == ChannelNewsThread) && c.ParentID == parentID {
			out = append(out, *c)
		}
	}
	// Snowflakes grow with time: sorting by id is creation order.
	sortChannels(out)
	return out
}

// Typing returns how many typing indicators a channel got.
func (s *Server) Typing(channelID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.typing[channelID]
}

// Commands returns the slash commands last registered globally (guild "") or for a guild.
func (s *Server) Commands(guildID string) []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if guildID == "" {
		guildID = "global"
	}
	return append([]json.RawMessage(nil), s.commands[guildID]...)
}

// Requests returns every REST call so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// rateRule makes the next N matching requests answer 429.
type rateRule struct {
	method, prefix string
	// contains, when set, must be in the request body.
	contains   string
	retryAfter time.Duration
	left       int
}

// RateLimit makes the next n requests whose method is method and whose path (after /api/v{n})
// starts with pathPrefix answer 429 with retry_after, as Discord's per-route limits do.
func (s *Server) RateLimit(method, pathPrefix string, retryAfter time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, &rateRule{method: method, prefix: pathPrefix, retryAfter: retryAfter, left: n})
}

// RateLimitWhen is RateLimit for requests whose body contains substr (one message among others).
func (s *Server) RateLimitWhen(method, pathPrefix, substr string, retryAfter time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, &rateRule{method: method, prefix: pathPrefix, contains: substr, retryAfter: retryAfter, left: n})
}

// limitedLocked consumes a matching 429 rule. Callers hold mu.
func (s *Server) limitedLocked(method, path string, body []byte) (time.Duration, bool) {
	for _, r := range s.limits {
		if r.left > 0 && r.method == method && strings.HasPrefix(path, r.prefix) && bytes.Contains(body, []byte(r.contains)) {
			r.left--
			return r.retryAfter, true
		}
	}
	return 0, false
}

// ensureChannelLocked returns a channel, creating it. Callers hold mu.
func (s *Server) ensureChannelLocked(c Channel) *Channel {
	if have, ok := s.channels[c.ID]; ok {
		return have
	}
	cc := c
	s.channels[c.ID] = &cc
	return &cc
}

func (s *Server) findLocked(channelID, messageID string) *Message {
	for _, m := range s.messages[channelID] {
		if m.ID == messageID {
			return m
		}
	}
	return nil
}

func sortChannels(cs []Channel) {
	slices.SortFunc(cs, func(a, b Channel) int { return cmpSnowflake(a.ID, b.ID) })
}

// cmpSnowflake orders ids numerically (they are decimal strings of growing numbers).
func cmpSnowflake(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}
