// Package web is the local web chat: a page (embedded, no external URLs, no build step) and the JSON
// API behind it. Each conversation is a thread (bot.WebThread) with its own sandbox; messages go
// through the same bot.Handler as Slack and Discord, and the Replier calls come back to the page as
// server-sent events. The README ("Web chat JSON API") documents the API.
package web

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

//go:embed static
var staticFS embed.FS

// MessageHandler is what the web chat needs from the bot: *bot.Handler implements it.
type MessageHandler interface {
	Handle(ctx context.Context, msg bot.Message, r bot.Replier) error
}

// Options configure the web chat.
type Options struct {
	// Handler routes messages (commands or turns); required.
	Handler MessageHandler
	// Admin runs admin commands; nil refuses them all.
	Admin *bot.Admin
	// Directory is read for conversations, history and the operations view; required.
	Directory *bot.Directory
	// Token, when set, lets clients in with "Authorization: Bearer <token>" (or a cookie set by
	// opening the page with ?token=) as web:token.
	Token string
	// TrustLoopback lets a client on this machine in without the token, as web:local (http.
	// trust_loopback; make run sets it). Off by default: a reverse proxy or tunnel on this machine
	// makes every visitor look local, and only the Forwarded headers, which a proxy may not add,
	// would tell them apart.
	TrustLoopback bool
	// LoginToken, when set, is a one-time login: opening the page once with ?login=<token> signs that
	// browser in as web:local (a cookie), and the token is spent. serve prints it for the person who
	// started the bot, as Jupyter does.
	LoginToken string
	// PublicURL is the address browsers open the chat at (http.public_url), when it is not the
	// listener's own: behind a proxy that ends TLS, an https URL here marks the session cookies
	// Secure. X-Forwarded-Proto is not used for that: anyone can send it.
	PublicURL string
	// Warning is shown as a banner on every page (for example: the sandbox provider isolates nothing).
	Warning string
	Logger  *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// MaxFileMemory caps the artifact bytes held in memory for download (default 256 MiB); the oldest
	// files are forgotten first.
	MaxFileMemory int64
	// MaxTextBytes caps one message's text (default 1 MiB); longer text is refused with 413.
	MaxTextBytes int
}

// Defaults for Options and the limits the API documents.
const (
	DefaultMaxFileMemory = 256 << 20
	DefaultMaxTextBytes  = 1 << 20
	// maxJSONBody leaves room for a MaxTextBytes text whose characters JSON escapes (\u0000 is six bytes).
	maxJSONBody = 8 << 20
	// maxUploadFile and maxUploadFiles bound the attachments of one multipart message.
	maxUploadFile  = 25 << 20
	maxUploadFiles = 16
	// maxMultipartBody bounds a whole multipart message.
	maxMultipartBody = 64 << 20
	// displayTextMax is how much of a message or answer an event or the history carries; the agent
	// and the database get all of it.
	displayTextMax = 64 << 10
)

// webLimits are the sizes the bot lays answers out for: the page scrolls, so messages may be long.
var webLimits = bot.Limits{MaxMessage: 32000, MaxChunks: 8, MaxFileBytes: maxUploadFile}

// Server serves the page and the API. It is an http.Handler meant to be mounted at "/".
type Server struct {
	handler  MessageHandler
	admin    *bot.Admin
	dir      *bot.Directory
	hasToken bool
	tokenSum [32]byte
	trustLo  bool
	// secureCookies marks every session cookie Secure (an https PublicURL), not only over TLS.
	secureCookies bool
	login         *oneTimeLogin
	warning       string
	log           *zap.Logger
	now           func() time.Time
	maxText       int
	// streamWriteTimeout ends an event stream whose client takes no bytes for this long.
	streamWriteTimeout time.Duration
	// maxStreams and maxConvStreams cap the event streams open in all and on one conversation.
	maxStreams, maxConvStreams int
	// epoch names this process's event numbering, so a browser reconnecting after a restart is told
	// to reload instead of waiting for sequence numbers that now mean something else.
	epoch string
	page  *template.Template
	mux   *http.ServeMux
	files *fileStore

	// ctx is the base of message handling; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	// mu protects the following.
	mu    sync.Mutex
	convs map[string]*conversation
	// lru orders convs' *conversation, most recently used first (see lookup and touch).
	lru *list.List
	// seqFloor is the highest event number of a conversation forgotten (lookup); a conversation
	// registered later numbers its events after it.
	seqFloor int64
	// streams counts the event streams open.
	streams int
	closed  bool
}

// New builds the web chat.
func New(opts Options) (*Server, error) {
	if opts.Handler == nil || opts.Directory == nil {
		return nil, errors.New("web: Handler and Directory are required")
	}
	page, err := template.ParseFS(staticFS, "static/index.html")
	if err != nil {
		return nil, err
	}
	s := &Server{
		handler: opts.Handler, admin: opts.Admin, dir: opts.Directory, warning: opts.Warning,
		log: opts.Logger, now: opts.Now, maxText: opts.MaxTextBytes, page: page,
		convs: map[string]*conversation{}, lru: list.New(), epoch: randomID(6), streamWriteTimeout: streamWriteTimeout,
		maxStreams: maxStreams, maxConvStreams: maxConvStreams,
	}
	if opts.Token != "" {
		s.hasToken, s.tokenSum = true, sha256.Sum256([]byte(opts.Token))
	}
	s.trustLo = opts.TrustLoopback
	if opts.PublicURL != "" {
		u, err := url.Parse(opts.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errors.New("web: PublicURL must be an http:// or https:// URL")
		}
		s.secureCookies = u.Scheme == "https"
	}
	if opts.LoginToken != "" {
		s.login = newOneTimeLogin(opts.LoginToken)
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.Named("web")
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxText <= 0 {
		s.maxText = DefaultMaxTextBytes
	}
	fileMax := opts.MaxFileMemory
	if fileMax <= 0 {
		fileMax = DefaultMaxFileMemory
	}
	s.files = newFileStore(fileMax)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	static, _ := fs.Sub(staticFS, "static")
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.servePage)
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /api/me", s.serveMe)
	m.HandleFunc("GET /api/conversations", s.listConversations)
	m.HandleFunc("POST /api/conversations", s.createConversation)
	m.HandleFunc("GET /api/conversations/{id}", s.getConversation)
	m.HandleFunc("POST /api/conversations/{id}/messages", s.postMessage)
	m.HandleFunc("GET /api/conversations/{id}/events", s.streamEvents)
	m.HandleFunc("GET /api/files/{id}", s.serveFile)
	m.HandleFunc("GET /api/admin/sessions", s.adminSessions)
	m.HandleFunc("POST /api/admin/{command}", s.adminCommand)
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+quoted(r.URL.Path))
	})
	s.mux = m
}

// ServeHTTP implements http.Handler: every route needs an identity (see auth.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	id, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
}

// Close stops taking messages, ends the event streams (so http.Server.Shutdown is not held up by
// them) and waits for messages already accepted to be handed to the bot. Turns keep running in the
// pool; their replies are dropped once nobody listens.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	convs := make([]*conversation, 0, len(s.convs))
	for _, c := range s.convs {
		convs = append(convs, c)
	}
	s.mu.Unlock()
	s.cancel()
	for _, c := range convs {
		c.dropSubscribers()
	}
	return nil
}

// pageCSP allows only this origin: the page has no inline script and no external resource.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query(); q.Has("token") || q.Has("login") {
		// authenticate set the cookie; drop the token from the address bar and history.
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.page.Execute(w, struct{ Warning string }{s.warning}); err != nil {
		s.log.Debug("writing the page", zap.Error(err))
	}
}

type meJSON struct {
	Actor   string `json:"actor"`
	Name    string `json:"name"`
	Admin   bool   `json:"admin"`
	Local   bool   `json:"loopback"`
	Warning string `json:"warning,omitempty"`
}

func (s *Server) serveMe(w http.ResponseWriter, r *http.Request) {
	id := identityFrom(r.Context())
	writeJSON(w, http.StatusOK, meJSON{Actor: id.actor(), Name: id.user.Name, Admin: s.isAdmin(r),
		Local: id.local, Warning: s.warning})
}

// isAdmin reports whether the caller is in admin.users (as web:<id>).
func (s *Server) isAdmin(r *http.Request) bool {
	return s.admin.IsAdmin(identityFrom(r.Context()).actor())
}

// randomID returns n random bytes as URL-safe base64: conversation, event and file ids.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b)
}
