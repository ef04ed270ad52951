package slackfake

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxText is where Slack starts truncating message text; the fake refuses longer text instead, so a
// bot that posts it is caught.
const maxText = 40000

type tokenKind int

const (
	botToken tokenKind = iota
	appToken
)

// methodTokens says which token each method accepts (Slack answers not_allowed_token_type otherwise).
var methodTokens = map[string]tokenKind{
	"auth.test": botToken, "chat.postMessage": botToken, "chat.postEphemeral": botToken, "chat.update": botToken,
	"reactions.add": botToken, "reactions.remove": botToken, "files.getUploadURLExternal": botToken,
	"files.completeUploadExternal": botToken, "conversations.replies": botToken, "users.info": botToken,
	"apps.connections.open": appToken,
}

type apiFunc func(s *Server, p map[string]string) (map[string]any, string)

var methods = map[string]apiFunc{
	"auth.test":                    (*Server).authTest,
	"chat.postMessage":             (*Server).chatPostMessage,
	"chat.postEphemeral":           (*Server).chatPostEphemeral,
	"chat.update":                  (*Server).chatUpdate,
	"reactions.add":                (*Server).reactionsAdd,
	"reactions.remove":             (*Server).reactionsRemove,
	"files.getUploadURLExternal":   (*Server).filesGetUploadURL,
	"files.completeUploadExternal": (*Server).filesComplete,
	"conversations.replies":        (*Server).conversationsReplies,
	"users.info":                   (*Server).usersInfo,
	"apps.connections.open":        (*Server).appsConnectionsOpen,
}

// serveAPI is https://slack.com/api/<method>: token check, injected faults, then the method. Like
// Slack, errors are HTTP 200 {"ok":false,"error":…}, except rate limits (429 with Retry-After).
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	params, err := readParams(r)
	if !s.held(r, method) {
		return
	}
	call := Call{Method: method, Params: params, Token: params["token"], At: time.Now()}
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		call.Token = strings.TrimPrefix(h, "Bearer ")
	}
	delete(call.Params, "token")
	status, body := s.answer(method, call.Token, params, err)
	call.Status = status
	if ok, _ := body["ok"].(bool); !ok {
		call.Error, _ = body["error"].(string)
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.changedLocked()
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if ra, ok := body["_retry_after"].(int); ok {
		delete(body, "_retry_after")
		w.Header().Set("Retry-After", strconv.Itoa(ra))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (s *Server) answer(method, token string, params map[string]string, parseErr error) (int, map[string]any) {
	fail := func(code string) (int, map[string]any) {
		return http.StatusOK, map[string]any{"ok": false, "error": code}
	}
	fn, known := methods[method]
	if !known {
		return fail("unknown_method")
	}
	if parseErr != nil {
		return fail("invalid_form_data")
	}
	switch {
	case token == "":
		return fail("not_authed")
	case token != s.opts.BotToken && token != s.opts.AppToken:
		return fail("invalid_auth")
	case (methodTokens[method] == appToken) != (token == s.opts.AppToken):
		return fail("not_allowed_token_type")
	}
	s.mu.Lock()
	var f *fault
	if q := s.faults[method]; len(q) > 0 {
		f = &q[0]
		s.faults[method] = q[1:]
	}
	s.mu.Unlock()
	if f != nil {
		body := map[string]any{"ok": false, "error": f.err}
		if f.status == http.StatusTooManyRequests {
			body["_retry_after"] = max(1, int(f.retryAfter.Seconds()))
		}
		return f.status, body
	}
	out, errCode := fn(s, params)
	if errCode != "" {
		return fail(errCode)
	}
	if out == nil {
		out = map[string]any{}
	}
	out["ok"] = true
	return http.StatusOK, out
}

// readParams accepts what Slack accepts: query parameters, a form body, or a JSON body.
func readParams(r *http.Request) (map[string]string, error) {
	p := map[string]string{}
	for k, v := range r.URL.Query() {
		p[k] = v[0]
	}
	if r.Method != http.MethodPost {
		return p, nil
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil || len(strings.TrimSpace(string(body))) == 0 {
			return p, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return p, err
		}
		for k, raw := range m {
			var str string
			if json.Unmarshal(raw, &str) == nil {
				p[k] = str
			} else {
				p[k] = string(raw)
			}
		}
		return p, nil
	}
	if err := r.ParseForm(); err != nil {
		return p, err
	}
	for k, v := range r.PostForm {
		p[k] = v[0]
	}
	return p, nil
}

func (s *Server) authTest(map[string]string) (map[string]any, string) {
	return map[string]any{
		"url": "https://fake.slack.com/", "team": s.opts.TeamName, "user": "threadbox",
		"team_id": s.opts.TeamID, "user_id": s.opts.BotUserID, "bot_id": s.opts.BotID,
	}, ""
}

func (s *Server) chatPostMessage(p map[string]string) (map[string]any, string) {
	ch := p["channel"]
	text := p["text"]
	if ch == "" {
		return nil, "channel_not_found"
	}
	if code := textError(p); code != "" {
		return nil, code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	thread := p["thread_ts"]
	if !s.threadKnownLocked(ch, thread) {
		return nil, "thread_not_found"
	}
	m := &Message{Channel: ch, TS: s.nextTSLocked(), ThreadTS: thread, User: s.opts.BotUserID, BotID: s.opts.BotID, Text: text}
	s.messages[ch+"/"+m.TS] = m
	s.changedLocked()
	return map[string]any{"channel": ch, "ts": m.TS, "message": wireMessage(m)}, ""
}

// textError is Slack's error code for a post's text and parameters p ("" when fine): nothing to
// show at all, or text over maxText.
func textError(p map[string]string) string {
	switch text := p["text"]; {
	case text == "" && p["blocks"] == "" && p["attachments"] == "":
		return "no_text"
	case utf8.RuneCountInString(text) > maxText:
		return "msg_too_long"
	}
	return ""
}

// threadKnownLocked reports whether a post to thread ("" for none) in ch may go ahead. The fake
// refuses a reply to a thread it never saw: in tests that is always a bug in the bot (a wrong ts),
// which real Slack would not flag as loudly.
func (s *Server) threadKnownLocked(ch, thread string) bool {
	if thread == "" {
		return true
	}
	_, ok := s.messages[ch+"/"+thread]
	return ok
}

// chatPostEphemeral is chat.postEphemeral: a message only user sees, in channel (and thread_ts's
// thread). As in Slack it is not a conversation message: conversations.replies and Messages do not list
// it, it cannot be updated or reacted to, and the answer carries message_ts, not ts or message.
func (s *Server) chatPostEphemeral(p map[string]string) (map[string]any, string) {
	ch, user, text := p["channel"], p["user"], p["text"]
	switch {
	case ch == "":
		return nil, "channel_not_found"
	case user == "":
		return nil, "user_not_found"
	}
	if code := textError(p); code != "" {
		return nil, code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	thread := p["thread_ts"]
	if !s.threadKnownLocked(ch, thread) {
		return nil, "thread_not_found"
	}
	e := Ephemeral{Channel: ch, User: user, ThreadTS: thread, Text: text, MessageTS: s.nextTSLocked()}
	s.ephemerals = append(s.ephemerals, e)
	s.changedLocked()
	return map[string]any{"message_ts": e.MessageTS}, ""
}

func (s *Server) chatUpdate(p map[string]string) (map[string]any, string) {
	ch, ts, text := p["channel"], p["ts"], p["text"]
	if ch == "" {
		return nil, "channel_not_found"
	}
	if utf8.RuneCountInString(text) > maxText {
		return nil, "msg_too_long"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[ch+"/"+ts]
	switch {
	case !ok:
		return nil, "message_not_found"
	case m.BotID != s.opts.BotID:
		return nil, "cant_update_message"
	case text == "" && p["blocks"] == "":
		return nil, "no_text"
	}
	m.Edits = append(m.Edits, m.Text)
	m.Text = text
	s.changedLocked()
	return map[string]any{"channel": ch, "ts": ts, "text": text, "message": wireMessage(m)}, ""
}

func (s *Server) reactionsAdd(p map[string]string) (map[string]any, string) {
	return s.react(p, false)
}

func (s *Server) reactionsRemove(p map[string]string) (map[string]any, string) {
	return s.react(p, true)
}

func (s *Server) react(p map[string]string, remove bool) (map[string]any, string) {
	ch, ts, name := p["channel"], p["timestamp"], strings.Trim(p["name"], ":")
	if name == "" {
		return nil, "invalid_name"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := ch + "/" + ts
	if _, ok := s.messages[key]; !ok {
		return nil, "message_not_found"
	}
	cur := s.reactions[key]
	has := slices.Contains(cur, name)
	switch {
	case remove && !has:
		return nil, "no_reaction"
	case !remove && has:
		return nil, "already_reacted"
	case remove:
		s.reactions[key] = slices.DeleteFunc(slices.Clone(cur), func(n string) bool { return n == name })
	default:
		s.reactions[key] = append(cur, name)
	}
	s.reactLog = append(s.reactLog, ReactionChange{Channel: ch, TS: ts, Name: name, Removed: remove})
	if !remove {
		s.added[name]++
	}
	s.changedLocked()
	return nil, ""
}

func (s *Server) usersInfo(p map[string]string) (map[string]any, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := p["user"]
	name, ok := s.users[id]
	if !ok {
		return nil, "user_not_found"
	}
	return map[string]any{"user": map[string]any{
		"id": id, "team_id": s.opts.TeamID, "name": name, "real_name": name,
		"is_bot": id == s.opts.BotUserID, "deleted": false,
		"profile": map[string]any{"real_name": name, "display_name": name},
	}}, ""
}
