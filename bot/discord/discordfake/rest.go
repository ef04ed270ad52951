package discordfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Discord's JSON error codes the fake uses.
const (
	codeUnknownChannel      = 10003
	codeUnknownMessage      = 10008
	codeUnknownWebhook      = 10015
	codeUnknownInteraction  = 10062
	codeMissingAccess       = 50001
	codeInvalidWebhookToken = 50027
	codeEmptyMessage        = 50006
	codeAlreadyAcked        = 40060
	codeThreadExists        = 160004
	codeTooLong             = 50035
)

// maxContent is Discord's limit on a message's content.
const maxContent = 2000

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	api := func(pattern string, auth bool, h http.HandlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		mux.Handle(method+" /api/{version}"+path, s.record(auth, h))
	}
	api("GET /gateway", false, s.getGateway)
	api("GET /gateway/bot", true, s.getGateway)
	api("GET /users/@me", true, s.getMe)
	api("GET /channels/{channel}", true, s.getChannel)
	api("GET /channels/{channel}/messages", true, s.getMessages)
	api("POST /channels/{channel}/messages", true, s.postMessage)
	api("PATCH /channels/{channel}/messages/{message}", true, s.editMessage)
	api("PUT /channels/{channel}/messages/{message}/reactions/{emoji}/@me", true, s.react(true))
	api("DELETE /channels/{channel}/messages/{message}/reactions/{emoji}/@me", true, s.react(false))
	api("POST /channels/{channel}/typing", true, s.postTyping)
	api("POST /channels/{channel}/messages/{message}/threads", true, s.threadFromMessage)
	api("POST /channels/{channel}/threads", true, s.threadBare)
	api("PUT /applications/{app}/commands", true, s.putCommands)
	api("PUT /applications/{app}/guilds/{guild}/commands", true, s.putCommands)
	// Interaction callbacks and webhooks authenticate with the interaction token in the path.
	api("POST /interactions/{id}/{token}/callback", false, s.callback)
	api("PATCH /webhooks/{app}/{token}/messages/@original", false, s.editOriginal)
	api("POST /webhooks/{app}/{token}", false, s.followup)
	// Attachments are served from the fake's own host, standing in for cdn.discordapp.com.
	mux.HandleFunc("GET /attachments/{channel}/{id}/{name}", s.getAttachment)
	mux.HandleFunc("GET /gateway", s.serveGateway)
	mux.HandleFunc("GET /gateway/", s.serveGateway) // discordgo adds a slash before ?v=
	return mux
}

// statusRecorder keeps the status for the request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// record logs the request, checks the bot token, applies injected 429s and sets the rate-limit
// headers Discord sends on every answer.
func (s *Server) record(auth bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		path := strings.TrimPrefix(r.URL.Path, "/api/"+r.PathValue("version"))
		defer func() {
			s.mu.Lock()
			s.requests = append(s.requests, Request{Method: r.Method, Path: path, Status: rec.status, At: time.Now()})
			s.notifyLocked()
			s.mu.Unlock()
		}()
		if auth && !s.authorized(r) {
			writeError(rec, http.StatusUnauthorized, 0, "401: Unauthorized")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 200<<20))
		if err != nil {
			writeError(rec, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		wait, limited := s.limitedLocked(r.Method, path, body)
		s.mu.Unlock()
		bucket := fmt.Sprintf("%x", len(path)) // a stable per-route bucket name
		hd := rec.Header()
		hd.Set("X-RateLimit-Bucket", bucket)
		hd.Set("X-RateLimit-Limit", "5")
		if limited {
			secs := wait.Seconds()
			hd.Set("X-RateLimit-Remaining", "0")
			hd.Set("X-RateLimit-Reset-After", strconv.FormatFloat(secs, 'f', 3, 64))
			hd.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(time.Now().Add(wait).UnixMilli())/1000, 'f', 3, 64))
			hd.Set("Retry-After", strconv.Itoa(int(math.Ceil(secs))))
			hd.Set("X-RateLimit-Scope", "user")
			writeJSON(rec, http.StatusTooManyRequests, map[string]any{
				"message": "You are being rate limited.", "retry_after": secs, "global": false,
			})
			return
		}
		// Plenty left: the fake limits only when a test asks it to (RateLimit).
		hd.Set("X-RateLimit-Remaining", "4")
		hd.Set("X-RateLimit-Reset-After", "1.000")
		hd.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(time.Now().Add(time.Second).UnixMilli())/1000, 'f', 3, 64))
		h(rec, r)
	})
}

// authorized accepts "Bot <token>" (discordgo sends the token as given, with its prefix).
func (s *Server) authorized(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bot "+s.opts.BotToken
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers Discord's error shape: {"message": …, "code": …}.
func writeError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"message": msg, "code": code})
}

func (s *Server) getGateway(w http.ResponseWriter, r *http.Request) {
	url := "ws://" + s.Host() + "/gateway"
	if strings.HasSuffix(r.URL.Path, "/bot") {
		writeJSON(w, http.StatusOK, map[string]any{"url": url, "shards": 1, "session_start_limit": map[string]any{
			"total": 1000, "remaining": 999, "reset_after": 14400000, "max_concurrency": 1,
		}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": url})
}

func (s *Server) getMe(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.BotUser())
}

func (s *Server) getChannel(w http.ResponseWriter, r *http.Request) {
	c, ok := s.Channel(r.PathValue("channel"))
	if !ok {
		writeError(w, http.StatusNotFound, codeUnknownChannel, "Unknown Channel")
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// outgoing is the body of a message the bot sends or edits (JSON, or payload_json with files[n]).
type outgoing struct {
	Content *string `json:"content"`
	Flags   int     `json:"flags"`
	Files   []Attachment
}

// readOutgoing parses application/json or multipart/form-data (payload_json plus files[n]).
func (s *Server) readOutgoing(r *http.Request) (outgoing, error) {
	var out outgoing
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&out)
		return out, err
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		data, err := io.ReadAll(io.LimitReader(p, 100<<20))
		if err != nil {
			return out, err
		}
		switch name := p.FormName(); {
		case name == "payload_json":
			if err := json.Unmarshal(data, &out); err != nil {
				return out, fmt.Errorf("payload_json: %w", err)
			}
		case strings.HasPrefix(name, "files["):
			out.Files = append(out.Files, Attachment{
				Filename: p.FileName(), Size: int64(len(data)), ContentType: p.Header.Get("Content-Type"), Data: data,
			})
		default:
			return out, fmt.Errorf("unexpected form field %q", name)
		}
	}
}

// outgoingOr400 reads a message body, answering Discord's 400 when it cannot.
func (s *Server) outgoingOr400(w http.ResponseWriter, r *http.Request) (outgoing, bool) {
	o, err := s.readOutgoing(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
		return o, false
	}
	return o, true
}

// newMessageLocked validates and stores a bot message. Callers hold mu.
func (s *Server) newMessageLocked(channelID string, o outgoing) (*Message, int, string) {
	content := ""
	if o.Content != nil {
		content = *o.Content
	}
	switch {
	case content == "" && len(o.Files) == 0:
		return nil, codeEmptyMessage, "Cannot send an empty message"
	case len([]rune(content)) > maxContent:
		return nil, codeTooLong, "Invalid Form Body: content: Must be 2000 or fewer in length."
	}
	m := &Message{
		ID: s.idLocked(), ChannelID: channelID, Author: s.BotUser(), Content: content,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}, Flags: o.Flags, At: time.Now(),
	}
	if c := s.channels[channelID]; c != nil {
		m.GuildID = c.GuildID
	}
	m.Attachments = s.attachLocked(channelID, o.Files)
	s.messages[channelID] = append(s.messages[channelID], m)
	// Like Discord, the bot's own messages come back to it on the gateway.
	s.dispatchOrHoldLocked("MESSAGE_CREATE", m)
	return m, 0, ""
}

func (s *Server) attachLocked(channelID string, files []Attachment) []Attachment {
	out := []Attachment{}
	for _, f := range files {
		f.ID = s.idLocked()
		f.URL = fmt.Sprintf("%s/attachments/%s/%s/%s", s.srv.URL, channelID, f.ID, f.Filename)
		out = append(out, f)
	}
	return out
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	o, ok := s.outgoingOr400(w, r)
	if !ok {
		return
	}
	ch := r.PathValue("channel")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.channels[ch]; !ok {
		writeError(w, http.StatusNotFound, codeUnknownChannel, "Unknown Channel")
		return
	}
	m, code, msg := s.newMessageLocked(ch, o)
	if m == nil {
		writeError(w, http.StatusBadRequest, code, msg)
		return
	}
	s.notifyLocked()
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) editMessage(w http.ResponseWriter, r *http.Request) {
	o, ok := s.outgoingOr400(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.findLocked(r.PathValue("channel"), r.PathValue("message"))
	switch {
	case m == nil:
		writeError(w, http.StatusNotFound, codeUnknownMessage, "Unknown Message")
		return
	case m.Author.ID != s.opts.BotUserID:
		writeError(w, http.StatusForbidden, 50005, "Cannot edit a message authored by another user")
		return
	}
	if !s.editLocked(w, m, o) {
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// editLocked applies an edit, recording the previous content. Callers hold mu.
func (s *Server) editLocked(w http.ResponseWriter, m *Message, o outgoing) bool {
	if o.Content != nil {
		if len([]rune(*o.Content)) > maxContent {
			writeError(w, http.StatusBadRequest, codeTooLong, "Invalid Form Body: content: Must be 2000 or fewer in length.")
			return false
		}
		m.Edits = append(m.Edits, m.Content)
		m.Content = *o.Content
	}
	m.Attachments = append(m.Attachments, s.attachLocked(m.ChannelID, o.Files)...)
	m.At = time.Now()
	s.notifyLocked()
	return true
}

func (s *Server) react(add bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		m := s.findLocked(r.PathValue("channel"), r.PathValue("message"))
		if m == nil {
			writeError(w, http.StatusNotFound, codeUnknownMessage, "Unknown Message")
			return
		}
		emoji := r.PathValue("emoji") // the mux has already unescaped it
		i := indexOf(m.Reactions, emoji)
		switch {
		case add && i < 0:
			m.Reactions = append(m.Reactions, emoji)
		case !add && i >= 0:
			m.Reactions = append(m.Reactions[:i], m.Reactions[i+1:]...)
		}
		s.notifyLocked()
		w.WriteHeader(http.StatusNoContent)
	}
}

func indexOf(list []string, v string) int {
	for i, x := range list {
		if x == v {
			return i
		}
	}
	return -1
}

func (s *Server) postTyping(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := r.PathValue("channel")
	if _, ok := s.channels[ch]; !ok {
		writeError(w, http.StatusNotFound, codeUnknownChannel, "Unknown Channel")
		return
	}
	s.typing[ch]++
	s.notifyLocked()
	w.WriteHeader(http.StatusNoContent)
}

// threadStart is the body of both thread routes.
type threadStart struct {
	Name                string `json:"name"`
	AutoArchiveDuration int    `json:"auto_archive_duration"`
	Type                int    `json:"type"`
}

// readThreadStart reads a thread's name and settings; a thread needs a name.
func readThreadStart(w http.ResponseWriter, r *http.Request) (threadStart, bool) {
	var ts threadStart
	if err := json.NewDecoder(r.Body).Decode(&ts); err != nil || ts.Name == "" {
		writeError(w, http.StatusBadRequest, codeTooLong, "Invalid Form Body: name: This field is required")
		return ts, false
	}
	return ts, true
}

// threadFromMessage starts a thread from a message; like Discord, the thread's id is the message's.
func (s *Server) threadFromMessage(w http.ResponseWriter, r *http.Request) {
	ts, ok := readThreadStart(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parent, msgID := r.PathValue("channel"), r.PathValue("message")
	pc := s.channels[parent]
	switch {
	case pc == nil:
		writeError(w, http.StatusNotFound, codeUnknownChannel, "Unknown Channel")
		return
	case pc.Type != ChannelGuildText && pc.Type != ChannelNews:
		writeError(w, http.StatusBadRequest, 50024, "Cannot execute action on this channel type")
		return
	case s.findLocked(parent, msgID) == nil:
		writeError(w, http.StatusNotFound, codeUnknownMessage, "Unknown Message")
		return
	case s.channels[msgID] != nil:
		writeError(w, http.StatusBadRequest, codeThreadExists, "A thread has already been created for this message")
		return
	}
	kind := ChannelPublicThread // Discord infers the kind from the channel
	if pc.Type == ChannelNews {
		kind = ChannelNewsThread
	}
	c := s.ensureChannelLocked(Channel{ID: msgID, Type: kind, GuildID: pc.GuildID, ParentID: parent,
		Name: ts.Name, OwnerID: s.opts.BotUserID, FromMessage: msgID})
	s.notifyLocked()
	writeJSON(w, http.StatusCreated, c)
}

// threadBare starts a thread without a starter message (/ask in a channel).
func (s *Server) threadBare(w http.ResponseWriter, r *http.Request) {
	ts, ok := readThreadStart(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pc := s.channels[r.PathValue("channel")]
	if pc == nil {
		writeError(w, http.StatusNotFound, codeUnknownChannel, "Unknown Channel")
		return
	}
	switch {
	case pc.Type == ChannelNews && ts.Type != ChannelNewsThread:
		// An announcement channel holds announcement threads only.
		writeError(w, http.StatusBadRequest, 50024, "Cannot execute action on this channel type")
		return
	case ts.Type == 0:
		ts.Type = 12 // Discord's default for a bare thread is private
	}
	c := s.ensureChannelLocked(Channel{ID: s.idLocked(), Type: ts.Type, GuildID: pc.GuildID, ParentID: pc.ID,
		Name: ts.Name, OwnerID: s.opts.BotUserID})
	s.notifyLocked()
	writeJSON(w, http.StatusCreated, c)
}

func (s *Server) putCommands(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("app") != s.opts.AppID {
		writeError(w, http.StatusForbidden, codeMissingAccess, "Missing Access")
		return
	}
	var cmds []json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&cmds); err != nil {
		writeError(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
		return
	}
	key := r.PathValue("guild")
	if key == "" {
		key = "global"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]map[string]any, 0, len(cmds))
	for _, c := range cmds {
		var m map[string]any
		_ = json.Unmarshal(c, &m)
		m["id"], m["application_id"], m["version"] = s.idLocked(), s.opts.AppID, s.idLocked()
		out = append(out, m)
	}
	s.commands[key] = cmds
	s.notifyLocked()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getAttachment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.messages[r.PathValue("channel")] {
		for _, a := range m.Attachments {
			if a.ID == r.PathValue("id") {
				w.Header().Set("Content-Type", a.ContentType)
				_, _ = w.Write(a.Data)
				return
			}
		}
	}
	http.NotFound(w, r)
}
