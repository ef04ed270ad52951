package web

import (
	"container/list"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Event types, as the page and API clients see them.
const (
	EventMessage  = "message"  // a user's message (EventID set)
	EventProgress = "progress" // the turn's single progress message, replaced by each new one
	EventPost     = "post"     // a message from the bot
	EventUpload   = "upload"   // a file from the bot (File set)
	EventReaction = "reaction" // a reaction on the user's message (Reaction set)
	EventReset    = "reset"    // the stream cannot resume where asked: reload the conversation
)

// Event is one thing that happened in a conversation.
type Event struct {
	// Seq numbers the conversation's events in this process; 0 for history read from the database.
	Seq  int64     `json:"seq,omitempty"`
	Type string    `json:"type"`
	At   time.Time `json:"at"`
	// EventID is a message's own id (its turn's dedupe key); ReplyTo names the message a reply,
	// progress, upload or reaction belongs to.
	EventID string `json:"event_id,omitempty"`
	ReplyTo string `json:"reply_to,omitempty"`
	User    string `json:"user,omitempty"`
	Text    string `json:"text,omitempty"`
	// Truncated is how many bytes of Text were left out of the event (the agent got them all).
	Truncated int       `json:"truncated,omitempty"`
	File      *FileRef  `json:"file,omitempty"`
	Files     []FileRef `json:"files,omitempty"`
	Reaction  string    `json:"reaction,omitempty"`

	// digest identifies a message's whole content (text and files), to tell a message sent again
	// under its Idempotency-Key from another one under the same key.
	digest string
}

func (e Event) size() int {
	n := 64 + len(e.Text) + len(e.EventID) + len(e.ReplyTo)
	if e.File != nil {
		n += len(e.File.Name) + 64
	}
	for _, f := range e.Files {
		n += len(f.Name) + 64
	}
	return n
}

// A conversation's in-memory log is bounded; what falls off is still in the database as turns.
const (
	maxLogEvents = 1000
	maxLogBytes  = 2 << 20
	// subBuffer is how far a slow stream may fall behind before it is dropped (and reconnects).
	subBuffer = 256
	// heartbeat keeps idle streams open through proxies that close silent connections.
	heartbeat = 20 * time.Second
	// streamWriteTimeout is how long a stream's client may take no bytes (its connection is full)
	// before the stream is ended: a client that never reads must not hold a handler for ever.
	streamWriteTimeout = 2 * heartbeat
	// maxStreams and maxConvStreams cap the event streams open in all and on one conversation: each
	// holds a handler, a connection and a subBuffer of events, and keeps its conversation from being
	// forgotten. A page opens one per conversation shown.
	maxStreams     = 1024
	maxConvStreams = 32
)

// conversation is one web thread's live state.
type conversation struct {
	id string
	// elem is its place in Server.lru, nil once forgotten; Server.mu protects it.
	elem *list.Element

	// mu protects the following.
	mu       sync.Mutex
	title    string
	created  time.Time
	last     time.Time
	log      []Event
	logBytes int
	seq      int64
	// evicted is the highest seq dropped off the front of the log: a stream resuming before it has
	// missed events.
	evicted int64
	subs    map[chan Event]struct{}
}

func newConversation(id string, now time.Time) *conversation {
	return &conversation{id: id, created: now, subs: map[chan Event]struct{}{}}
}

// publish numbers ev, keeps it in the log and hands it to every stream. A stream too slow to take
// it is dropped: its client reconnects and resumes from the log.
func (c *conversation) publish(ev Event) Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.publishLocked(ev)
}

// publishLocked is publish with c.mu held.
func (c *conversation) publishLocked(ev Event) Event {
	c.seq++
	ev.Seq = c.seq
	if ev.At.After(c.last) {
		c.last = ev.At
	}
	if ev.Type == EventMessage && c.title == "" {
		c.title = titleOf(ev.Text)
	}
	if ev.Type == EventProgress {
		// Only the newest progress of a turn matters to a client catching up.
		for i := len(c.log) - 1; i >= 0; i-- {
			if c.log[i].Type == EventProgress && c.log[i].ReplyTo == ev.ReplyTo {
				c.logBytes -= c.log[i].size()
				c.log = append(c.log[:i], c.log[i+1:]...)
				break
			}
		}
	}
	c.log = append(c.log, ev)
	c.logBytes += ev.size()
	for len(c.log) > 1 && (len(c.log) > maxLogEvents || c.logBytes > maxLogBytes) {
		c.evicted = c.log[0].Seq
		c.logBytes -= c.log[0].size()
		c.log = c.log[1:]
	}
	for ch := range c.subs {
		select {
		case ch <- ev:
		default:
			delete(c.subs, ch)
			close(ch)
		}
	}
	return ev
}

// publishMessage publishes a user's message, unless the log holds a message of the same event id
// already (the client sent it again with its Idempotency-Key): then it returns that one, so a
// message resent after an error shows once. same is false when that one is a different message
// (another text or other files under the same key): the bot would drop this one as a duplicate.
// The check and the publish are one step, so two sends at once show the message once.
func (c *conversation) publishMessage(ev Event) (_ Event, same bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, old := range c.log {
		if old.Type == EventMessage && old.EventID == ev.EventID {
			return old, old.digest == ev.digest
		}
	}
	return c.publishLocked(ev), true
}

// snapshot returns the log and the sequence number it ends at.
func (c *conversation) snapshot() ([]Event, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.log...), c.seq
}

// subscribe returns the events after seq and a channel for the ones to come; ok is false when the
// events right after seq are no longer held.
func (c *conversation) subscribe(after int64) (backlog []Event, ch chan Event, ok bool) {
	backlog, ch, ok, _ = c.subscribeCapped(after, 0)
	return backlog, ch, ok
}

// subscribeCapped is subscribe, refused (full) when max streams (if max > 0) are open on c already.
func (c *conversation) subscribeCapped(after int64, max int) (backlog []Event, ch chan Event, ok, full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if after < c.evicted || after > c.seq {
		return nil, nil, false, false
	}
	if max > 0 && len(c.subs) >= max {
		return nil, nil, false, true
	}
	for _, ev := range c.log {
		if ev.Seq > after {
			backlog = append(backlog, ev)
		}
	}
	ch = make(chan Event, subBuffer)
	c.subs[ch] = struct{}{}
	return backlog, ch, true, false
}

// errTooManyStreams answers an event stream past a cap.
var errTooManyStreams = errorf(http.StatusTooManyRequests, "too many event streams open: close another tab or stream, then try again")

// takeStream reserves one of the server's event streams; releaseStream gives it back.
func (s *Server) takeStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams >= s.maxStreams {
		return false
	}
	s.streams++
	return true
}

func (s *Server) releaseStream() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams--
}

func (c *conversation) unsubscribe(ch chan Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[ch]; ok {
		delete(c.subs, ch)
		close(ch)
	}
}

func (c *conversation) dropSubscribers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.subs {
		delete(c.subs, ch)
		close(ch)
	}
}

func titleOf(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	if r := []rune(t); len(r) > 60 {
		t = string(r[:59]) + "…"
	}
	return t
}

// cursor renders a position in a conversation's events: epoch.seq. The epoch changes with every
// process, so a client resuming across a restart is told to reload rather than miss events.
func (s *Server) cursor(seq int64) string { return s.epoch + "." + strconv.FormatInt(seq, 10) }

func (s *Server) parseCursor(c string) (int64, bool) {
	if c == "" {
		return 0, true
	}
	ep, n, ok := strings.Cut(c, ".")
	if !ok || ep != s.epoch {
		return 0, false
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	return seq, err == nil && seq >= 0
}

// streamEvents is GET /api/conversations/{id}/events: server-sent events, resuming after the
// Last-Event-ID header (set by a reconnecting EventSource) or the after parameter.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		// The headers alone: a HEAD would otherwise hold a stream whose bytes go nowhere.
		if !idPattern.MatchString(r.PathValue("id")) {
			writeError(w, http.StatusBadRequest, "bad conversation id: want 1 to 64 of A-Z a-z 0-9 _ -")
			return
		}
		setStreamHeaders(w)
		w.WriteHeader(http.StatusOK)
		return
	}
	if !s.takeStream() {
		s.writeErr(w, errTooManyStreams)
		return
	}
	defer s.releaseStream()
	c, err := s.conversationFor(r)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = r.URL.Query().Get("after")
	}
	rc := http.NewResponseController(w)
	// A server-wide write timeout would cut every stream; this one has its own heartbeat, and a
	// deadline renewed before each write, so a client that stops reading is cut off instead of
	// holding this handler (and its connection) for ever.
	alive := func() { _ = rc.SetWriteDeadline(time.Now().Add(s.streamWriteTimeout)) }
	alive()
	after, ok := s.parseCursor(from)
	var (
		backlog []Event
		ch      chan Event
		full    bool
	)
	if ok {
		backlog, ch, ok, full = c.subscribeCapped(after, s.maxConvStreams)
	}
	if full {
		s.writeErr(w, errTooManyStreams)
		return
	}
	setStreamHeaders(w)
	if !ok {
		w.WriteHeader(http.StatusOK)
		_ = writeSSE(w, Event{Type: EventReset, At: s.now().UTC()}, "")
		_ = rc.Flush()
		return
	}
	defer c.unsubscribe(ch)
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	for _, ev := range backlog {
		alive()
		if writeSSE(w, ev, s.cursor(ev.Seq)) != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case ev, open := <-ch:
			if !open {
				return // dropped as too slow, or the server is closing: the client reconnects
			}
			alive()
			if err := writeSSE(w, ev, s.cursor(ev.Seq)); err != nil {
				return
			}
		case <-tick.C:
			alive()
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
		if err := rc.Flush(); err != nil {
			s.log.Debug("event stream ended", zap.Error(err))
			return
		}
	}
}

func setStreamHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
}

// writeSSE writes one event. JSON has no raw newlines, so the data is one line.
func writeSSE(w http.ResponseWriter, ev Event, id string) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if id != "" {
		if _, err := fmt.Fprintf(w, "id: %s\n", id); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "data: %s\n\n", data)
	return err
}
