package web

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/bot"
)

// Conversations. There is no conversations table: a conversation is a thread key web:<id>. The list
// is the union of
//   - the sessions whose thread key starts with web: (any status), which survive restarts, and
//   - the conversations this process has seen (created, or sent to), which may have no session yet.
//
// A conversation created but never used is therefore forgotten on restart; one that ran a turn is not.

// idPattern is what a conversation id may be: URL-safe, and free of ':' so web:<id> parses back.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// maxConversations bounds the conversations held in memory (see lookup).
const maxConversations = 10_000

// forgetScan bounds how many conversations forgetIdleLocked looks at, under the lock every request
// takes.
const forgetScan = 64

// maxListed bounds the conversation list.
const maxListed = 500

// historyTurns and historyChars cap the turns read back from the database for one conversation.
const (
	historyTurns = 200
	historyChars = 16 << 20
)

// conversationJSON is a conversation in the list and in GET /api/conversations/{id}.
type conversationJSON struct {
	ID             string       `json:"id"`
	ThreadKey      string       `json:"thread_key"`
	Title          string       `json:"title"`
	CreatedAt      *time.Time   `json:"created_at,omitempty"`
	LastActivityAt *time.Time   `json:"last_activity_at,omitempty"`
	Session        *sessionJSON `json:"session"`
}

// conversationDetailJSON is GET /api/conversations/{id}: the history, and where its event stream
// starts.
type conversationDetailJSON struct {
	conversationJSON
	Items  []Event `json:"items"`
	Cursor string  `json:"cursor"`
}

// lookup returns the conversation if this process knows it; with create it registers it, first
// forgetting the least recently active one without an open stream when maxConversations are held.
// A forgotten conversation's turns are still in the database; a turn still running in it goes on
// answering into the forgotten copy, and a client that comes back gets a fresh one (its stream is
// reset, and the history is read from the database).
func (s *Server) lookup(id string, create bool) *conversation {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.convs[id]
	switch {
	case c != nil:
		s.lru.MoveToFront(c.elem)
	case create:
		if len(s.convs) >= maxConversations {
			s.forgetIdleLocked()
		}
		c = newConversation(id, s.now().UTC())
		// Numbered after every event of a forgotten copy, so a stream resuming from one is reset
		// rather than resumed in the middle of this one.
		c.seq, c.evicted = s.seqFloor, s.seqFloor
		s.convs[id] = c
		c.elem = s.lru.PushFront(c)
	}
	return c
}

// touch marks c used (an event published in it), unless it was forgotten.
func (s *Server) touch(c *conversation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.elem != nil {
		s.lru.MoveToFront(c.elem)
	}
}

// forgetIdleLocked drops the least recently used conversation that no stream is open on, looking
// at no more than forgetScan of them: one with a stream open is moved to the front instead, so the
// next call looks at others. Called with s.mu held.
func (s *Server) forgetIdleLocked() {
	e := s.lru.Back()
	for range forgetScan {
		if e == nil {
			return
		}
		prev := e.Prev()
		c := e.Value.(*conversation)
		c.mu.Lock()
		busy, seq := len(c.subs) > 0, c.seq
		c.mu.Unlock()
		if !busy {
			s.seqFloor = max(s.seqFloor, seq)
			s.lru.Remove(e)
			c.elem = nil
			delete(s.convs, c.id)
			return
		}
		s.lru.MoveToFront(e)
		e = prev
	}
	// All looked at have streams open (those are capped: maxStreams): the map holds one more for now.
}

// conversationFor validates {id} and returns the conversation, registering it: any well-formed id
// names a thread, so one known only to the database (or a bookmark) works as well as a new one.
func (s *Server) conversationFor(r *http.Request) (*conversation, error) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		return nil, errorf(http.StatusBadRequest, "bad conversation id: want 1 to 64 of A-Z a-z 0-9 _ -")
	}
	return s.lookup(id, true), nil
}

type createJSON struct {
	Title string `json:"title"`
}

// createConversation is POST /api/conversations.
func (s *Server) createConversation(w http.ResponseWriter, r *http.Request) {
	var req createJSON
	if err := decodeJSON(w, r, 64<<10, &req, true); err != nil {
		s.writeErr(w, err)
		return
	}
	id := randomID(12)
	c := s.lookup(id, true)
	c.mu.Lock()
	c.title = titleOf(req.Title)
	c.mu.Unlock()
	writeJSON(w, http.StatusCreated, s.describe(c, nil, false))
}

// describe renders a conversation and its session; the session's last error (internal text) only for
// an admin, as the in-thread status does.
func (s *Server) describe(c *conversation, sess *bot.SessionView, admin bool) conversationJSON {
	c.mu.Lock()
	out := conversationJSON{ID: c.id, ThreadKey: bot.WebThread(c.id).String(), Title: c.title,
		CreatedAt: timePtr(c.created), LastActivityAt: timePtr(c.last)}
	c.mu.Unlock()
	if sess != nil {
		out.Session = sessionOf(*sess)
		if !admin && out.Session.LastError != "" {
			out.Session.LastError = bot.LastErrorNote
		}
		if sess.LastActivityAt.After(ptrTime(out.LastActivityAt)) {
			out.LastActivityAt = timePtr(sess.LastActivityAt)
		}
		if out.CreatedAt == nil || sess.CreatedAt.Before(*out.CreatedAt) {
			out.CreatedAt = timePtr(sess.CreatedAt)
		}
	}
	return out
}

// activity is when a conversation last did something, for the list's order.
func activity(c conversationJSON) time.Time {
	last, created := ptrTime(c.LastActivityAt), ptrTime(c.CreatedAt)
	if last.After(created) {
		return last
	}
	return created
}

func ptrTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// listConversations is GET /api/conversations: newest activity first.
func (s *Server) listConversations(w http.ResponseWriter, r *http.Request) {
	sessions, err := s.dir.PlatformSessions(r.Context(), "web", maxListed)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	bySession := map[string]*bot.SessionView{}
	for i := range sessions {
		id := strings.TrimPrefix(sessions[i].ThreadKey, "web:")
		bySession[id] = &sessions[i]
		if c := s.lookup(id, false); c == nil {
			// First sight since start: register it, titled by its newest prompt.
			c = s.lookup(id, true)
			title := s.lastPrompt(r.Context(), id)
			c.mu.Lock()
			if c.title == "" {
				c.title = title
			}
			c.mu.Unlock()
		}
	}
	s.mu.Lock()
	convs := make([]*conversation, 0, len(s.convs))
	for _, c := range s.convs {
		convs = append(convs, c)
	}
	s.mu.Unlock()
	out := make([]conversationJSON, 0, len(convs))
	admin := s.isAdmin(r)
	for _, c := range convs {
		out = append(out, s.describe(c, bySession[c.id], admin))
	}
	slices.SortFunc(out, func(a, b conversationJSON) int {
		if c := activity(b).Compare(activity(a)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(out) > maxListed {
		out = out[:maxListed]
	}
	writeJSON(w, http.StatusOK, struct {
		Conversations []conversationJSON `json:"conversations"`
	}{out})
}

func (s *Server) lastPrompt(ctx context.Context, id string) string {
	turns, err := s.dir.History(ctx, bot.WebThread(id), 1, historyChars)
	if err != nil || len(turns) == 0 {
		return ""
	}
	return titleOf(turns[len(turns)-1].Prompt)
}

// getConversation is GET /api/conversations/{id}: its session, its history and a cursor for its
// event stream. The history is the turns in the database that this process has not seen (older ones,
// or all of them after a restart), then this process's events for it.
func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		writeError(w, http.StatusBadRequest, "bad conversation id: want 1 to 64 of A-Z a-z 0-9 _ -")
		return
	}
	key := bot.WebThread(id)
	var sess *bot.SessionView
	switch got, found, err := s.dir.Session(r.Context(), key); {
	case err != nil:
		s.writeErr(w, err)
		return
	case found:
		sess = &got
	}
	turns, err := s.dir.History(r.Context(), key, historyTurns, historyChars)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	c := s.lookup(id, false)
	if c == nil && sess == nil && len(turns) == 0 {
		writeError(w, http.StatusNotFound, "no conversation "+id)
		return
	}
	c = s.lookup(id, true)
	live, seq := c.snapshot()
	seen := map[string]bool{}
	for _, ev := range live {
		if ev.Type == EventMessage {
			seen[ev.EventID] = true
		}
	}
	var items []Event
	for _, t := range turns {
		if !seen[t.EventID] {
			items = append(items, s.turnEvents(key, t)...)
		}
	}
	for _, ev := range live {
		// A reply whose message fell off the log shows with its stored turn, if at all.
		if ev.Type == EventMessage || seen[ev.ReplyTo] {
			items = append(items, ev)
		}
	}
	out := conversationDetailJSON{conversationJSON: s.describe(c, sess, s.isAdmin(r)), Items: items, Cursor: s.cursor(seq)}
	if out.Title == "" && len(turns) > 0 {
		out.Title = titleOf(turns[len(turns)-1].Prompt)
	}
	if out.Items == nil {
		out.Items = []Event{}
	}
	writeJSON(w, http.StatusOK, out)
}

// turnEvents renders a stored turn of thread key as the events the page draws. A failure is told as
// the chat tells it, never in its recorded words (internal text).
func (s *Server) turnEvents(key bot.ThreadKey, t bot.TurnView) []Event {
	text, cut := clip(t.Prompt, displayTextMax)
	evs := []Event{{Type: EventMessage, At: t.CreatedAt, EventID: t.EventID, User: "web:" + t.UserID, Text: text, Truncated: cut}}
	answer := t.Answer
	switch {
	case t.Status == bot.TurnCancelled && answer == "":
		answer = "Stopped."
	case t.Status == bot.TurnFailed && answer == "":
		answer = "Sorry, that failed: " + t.ExplainFailure(s.log, zap.String("thread", key.String())).String()
	}
	if answer != "" {
		text, cut := clip(answer, displayTextMax)
		at := t.FinishedAt
		if at.IsZero() {
			at = t.CreatedAt
		}
		evs = append(evs, Event{Type: EventPost, At: at, ReplyTo: t.EventID, Text: text, Truncated: cut})
	}
	return evs
}

// enqueue hands msg to the bot, which records it and queues it on the conversation's thread behind
// the earlier messages; it returns at once, so "stop" never waits behind the message it means to stop.
func (s *Server) enqueue(ctx context.Context, c *conversation, msg bot.Message) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errorf(http.StatusServiceUnavailable, "the bot is shutting down; try again in a minute")
	}
	r := &replier{s: s, c: c, replyTo: msg.EventID}
	msg.Reply = r.dest()
	if err := s.handler.Handle(ctx, msg, r); err != nil {
		s.log.Warn("handling a message", zap.String("conversation", c.id), zap.String("event", msg.EventID), zap.Error(err))
		switch {
		case errors.Is(err, bot.ErrNotAccepted):
			return errorf(http.StatusServiceUnavailable, "the bot could not take that message; try again in a minute")
		case errors.Is(err, bot.ErrEventReused):
			// The bot's record, not this process's memory, knows the key (a restart came between).
			return errorf(http.StatusUnprocessableEntity, keyReusedText)
		}
	}
	return nil
}
