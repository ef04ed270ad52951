// Package slackfake is a fake Slack for tests: the Web API methods the bot calls, the file upload URL
// and private file URLs, and Socket Mode, speaking Slack's wire format and error shapes. It records
// everything it receives, can be told to fail or rate-limit calls, and sends the bot signed Events API
// requests, slash commands and Socket Mode envelopes exactly as Slack does.
//
// Point the bot at it with slack.api_url = Server.APIURL(). Upload URLs and url_private links are on
// the same scheme and host, which is what slack-go (v0.30.1+) requires before it sends the token.
package slackfake

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Options describe the fake workspace. Zero fields take the defaults shown.
type Options struct {
	BotToken      string // "xoxb-fake-bot-token"
	AppToken      string // "xapp-fake-app-token"
	SigningSecret string // "fake-signing-secret"
	TeamID        string // "T0FAKE"
	TeamName      string // "Fake Workspace"
	BotUserID     string // "U0BOT"
	BotID         string // "B0BOT"
	AppID         string // "A0APP"
	// PingInterval is how often the Socket Mode server sends WebSocket pings (default 5s); slack-go
	// reconnects when it hears none for 30 s.
	PingInterval time.Duration
	// AckTimeout is how long SendSocket waits for an envelope's ack (default 3s, Slack's deadline).
	AckTimeout time.Duration
}

func (o Options) withDefaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.BotToken, "xoxb-fake-bot-token")
	def(&o.AppToken, "xapp-fake-app-token")
	def(&o.SigningSecret, "fake-signing-secret")
	def(&o.TeamID, "T0FAKE")
	def(&o.TeamName, "Fake Workspace")
	def(&o.BotUserID, "U0BOT")
	def(&o.BotID, "B0BOT")
	def(&o.AppID, "A0APP")
	if o.PingInterval <= 0 {
		o.PingInterval = 5 * time.Second
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = 3 * time.Second
	}
	return o
}

// Call is one Web API request as received.
type Call struct {
	Method string
	// Params merges the query, the form body and a JSON body's top-level fields (non-strings as JSON).
	Params map[string]string
	Token  string
	// Status is the HTTP status sent back; Error the "error" field of an ok:false answer.
	Status int
	Error  string
	// At is when the call arrived.
	At time.Time
}

// Message is a message in the fake workspace: the users' (from the event builders) and the bot's.
type Message struct {
	Channel  string
	TS       string
	ThreadTS string
	User     string
	BotID    string
	// Username names another integration's post (BotPost); empty for users' and the bot's own.
	Username string
	Text     string
	// Edits holds earlier texts, oldest first (chat.update history).
	Edits []string
	Files []string
}

// Ephemeral is a chat.postEphemeral message: seen by User only, never part of the conversation.
type Ephemeral struct {
	Channel   string
	User      string
	ThreadTS  string
	Text      string
	MessageTS string
}

// ReactionChange is one reactions.add or reactions.remove that succeeded.
type ReactionChange struct {
	Channel, TS, Name string
	Removed           bool
}

// File is a file uploaded by the bot (upload URL plus files.completeUploadExternal) or added as a user
// attachment.
type File struct {
	ID       string
	Name     string
	Title    string
	Length   int
	Data     []byte
	Uploaded bool
	// Channel and ThreadTS are where completeUploadExternal shared it ("" while unshared).
	Channel  string
	ThreadTS string
	Comment  string
	Mimetype string
	User     string
}

// Ack is a Socket Mode acknowledgement the bot sent.
type Ack struct {
	EnvelopeID string
	Payload    []byte
}

// ResponsePost is a message the bot posted to a slash command's response_url.
type ResponsePost struct {
	CommandID string
	Body      []byte
}

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	opts Options
	srv  *httptest.Server

	// mu protects the following.
	mu         sync.Mutex
	calls      []Call
	messages   map[string]*Message // channel+"/"+ts
	ephemerals []Ephemeral
	reactions  map[string][]string // channel+"/"+ts → names
	reactLog   []ReactionChange
	added      map[string]int // reaction name → times added
	files      map[string]*File
	users      map[string]string // id → name
	faults     map[string][]fault
	holds      map[string]*Held
	tickets    map[string]bool
	conns      []*wsConn
	opened     int
	acks       []Ack
	waiters    map[string]chan Ack
	responses  []ResponsePost
	seq        int64
	micros     int64
	changed    chan struct{}
}

type fault struct {
	status     int
	retryAfter time.Duration
	err        string
}

// New starts a fake Slack on a loopback port.
func New(opts Options) *Server {
	s := &Server{
		opts:      opts.withDefaults(),
		messages:  map[string]*Message{},
		reactions: map[string][]string{},
		added:     map[string]int{},
		files:     map[string]*File{},
		users:     map[string]string{},
		faults:    map[string][]fault{},
		tickets:   map[string]bool{},
		waiters:   map[string]chan Ack{},
		micros:    time.Now().UnixMicro(),
		changed:   make(chan struct{}),
	}
	s.users[s.opts.BotUserID] = "threadbox"
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.serveAPI)
	mux.HandleFunc("POST /upload/v1/{id}", s.serveUpload)
	mux.HandleFunc("GET /files-pri/{team_file}/{rest...}", s.servePrivateFile)
	mux.HandleFunc("GET /signin", s.serveSignin)
	mux.HandleFunc("POST /commands/{id}", s.serveResponseURL)
	mux.HandleFunc("GET /link/", s.serveSocket)
	s.srv = httptest.NewServer(mux)
	return s
}

// Close stops the server and drops Socket Mode connections.
func (s *Server) Close() {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	s.srv.Close()
}

// Options returns the resolved options (tokens, ids, secret).
func (s *Server) Options() Options { return s.opts }

// URL is the server's base URL, without a trailing slash.
func (s *Server) URL() string { return s.srv.URL }

// APIURL is what slack.api_url should be: the Web API base, with the trailing slash slack-go needs.
func (s *Server) APIURL() string { return s.srv.URL + "/api/" }

// AddUser names a user for users.info.
func (s *Server) AddUser(id, name string) {
	s.mu.Lock()
	s.users[id] = name
	s.mu.Unlock()
}

// RateLimit makes the next n calls of method answer HTTP 429 with Retry-After (whole seconds, at
// least 1) and {"ok":false,"error":"ratelimited"}, as Slack does.
func (s *Server) RateLimit(method string, n int, retryAfter time.Duration) {
	s.addFault(method, n, fault{status: http.StatusTooManyRequests, retryAfter: retryAfter, err: "ratelimited"})
}

// Fail makes the next n calls of method answer HTTP 200 {"ok":false,"error":code}.
func (s *Server) Fail(method string, n int, code string) {
	s.addFault(method, n, fault{status: http.StatusOK, err: code})
}

// Held is a hold on the next calls of one Web API method (Server.Hold).
type Held struct {
	n        int // calls still to hold; protected by Server.mu
	waitOnce sync.Once
	waiting  chan struct{}
	goneOnce sync.Once
	gone     chan struct{}
	relOnce  sync.Once
	release  chan struct{}
}

// Waiting is closed once a held call waits.
func (h *Held) Waiting() <-chan struct{} { return h.waiting }

// Gone is closed once a held call's caller went away (a bot killed while it waited for Slack): that
// call was dropped, unanswered and unrecorded.
func (h *Held) Gone() <-chan struct{} { return h.gone }

// Release lets the held calls go on, answered and recorded as usual.
func (h *Held) Release() { h.relOnce.Do(func() { close(h.release) }) }

// Hold makes the next n calls of method wait, unanswered and unrecorded, until Release or until
// their caller goes away; later calls are answered as usual.
func (s *Server) Hold(method string, n int) *Held {
	h := &Held{n: n, waiting: make(chan struct{}), gone: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	if s.holds == nil {
		s.holds = map[string]*Held{}
	}
	s.holds[method] = h
	s.mu.Unlock()
	return h
}

// held waits while a call of method is held; it reports false when the caller went away meanwhile.
func (s *Server) held(r *http.Request, method string) bool {
	s.mu.Lock()
	h := s.holds[method]
	if h == nil || h.n <= 0 {
		s.mu.Unlock()
		return true
	}
	h.n--
	s.mu.Unlock()
	h.waitOnce.Do(func() { close(h.waiting) })
	select {
	case <-h.release:
		return true
	case <-r.Context().Done():
		h.goneOnce.Do(func() { close(h.gone) })
		return false
	}
}

func (s *Server) addFault(method string, n int, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[method] = append(s.faults[method], f)
	}
}

// Calls returns the Web API calls received, oldest first; only those of the given methods if any
// are named.
func (s *Server) Calls(methods ...string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if len(methods) == 0 || slices.Contains(methods, c.Method) {
			out = append(out, c)
		}
	}
	return out
}

// Message returns one message.
func (s *Server) Message(channel, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[channel+"/"+ts]
	if !ok {
		return Message{}, false
	}
	return copyMessage(m), true
}

// Messages returns a channel's messages (users' and the bot's, thread replies included) in ts order.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messagesLocked(func(m *Message) bool { return m.Channel == channel })
}

// Replies returns the messages in a thread after its root, in ts order.
func (s *Server) Replies(channel, threadTS string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messagesLocked(func(m *Message) bool {
		return m.Channel == channel && m.ThreadTS == threadTS && m.TS != threadTS
	})
}

// BotMessages returns the bot's messages in a channel, in ts order.
func (s *Server) BotMessages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messagesLocked(func(m *Message) bool { return m.Channel == channel && m.BotID != "" })
}

func (s *Server) messagesLocked(keep func(*Message) bool) []Message {
	var out []Message
	for _, m := range s.messages {
		if keep(m) {
			out = append(out, copyMessage(m))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TS < out[j].TS })
	return out
}

func copyMessage(m *Message) Message {
	c := *m
	c.Edits = slices.Clone(m.Edits)
	c.Files = slices.Clone(m.Files)
	return c
}

// Ephemerals returns the ephemeral messages posted in channel, oldest first.
func (s *Server) Ephemerals(channel string) []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Ephemeral
	for _, e := range s.ephemerals {
		if e.Channel == channel {
			out = append(out, e)
		}
	}
	return out
}

// Reactions returns the reactions now on a message, in the order they were added.
func (s *Server) Reactions(channel, ts string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reactions[channel+"/"+ts])
}

// ReactionsAdded counts the reactions named name ever added (removals do not subtract): a cheap
// condition for Wait when many turns are counted, where ReactionLog would copy the whole log on
// every change.
func (s *Server) ReactionsAdded(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.added[name]
}

// ReactionLog returns every reaction added or removed, oldest first.
func (s *Server) ReactionLog() []ReactionChange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reactLog)
}

// Files returns the files the bot shared into channel (every file the fake knows if channel is "").
func (s *Server) Files(channel string) []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []File
	for _, f := range s.files {
		if channel == "" || f.Channel == channel {
			c := *f
			c.Data = slices.Clone(f.Data)
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Acks returns the Socket Mode acknowledgements received, oldest first.
func (s *Server) Acks() []Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.acks)
}

// ResponsePosts returns what the bot posted to slash command response URLs.
func (s *Server) ResponsePosts() []ResponsePost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.responses)
}

// Wait blocks until cond is true or ctx ends. cond is re-checked after every change the fake
// records, so tests need neither sleeps nor polling. cond must not call Wait.
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
			return fmt.Errorf("slackfake: waiting: %w", ctx.Err())
		}
	}
}

// changedLocked wakes every Wait.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// nextTSLocked mints a unique, increasing message ts in Slack's "seconds.micros" form.
func (s *Server) nextTSLocked() string {
	s.micros++
	return fmt.Sprintf("%d.%06d", s.micros/1e6, s.micros%1e6)
}

// nextIDLocked mints an id with Slack's prefix conventions (F… files, Ev… events).
func (s *Server) nextIDLocked(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%08X", prefix, s.seq)
}

// DMChannel is the DM channel id the fake uses for a user.
func DMChannel(user string) string { return "D" + strings.TrimPrefix(user, "U") }
