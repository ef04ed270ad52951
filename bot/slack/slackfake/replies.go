package slackfake

import (
	"encoding/base64"
	"math/big"
	"strconv"
	"strings"
)

// conversations.replies as Slack serves it:
//   - ts may name the root or any reply; the answer is the root's thread, oldest first;
//   - the root comes first on the first page, whatever oldest and latest say (Slack always includes
//     the parent), and carries thread_ts = ts and reply_count;
//   - latest and oldest bound the replies, exclusively unless inclusive is true or 1; a value that is
//     not a timestamp is invalid_ts_latest / invalid_ts_oldest;
//   - pages hold limit messages (default and most 1000); has_more and response_metadata.next_cursor
//     say there is another page; a cursor the fake did not mint is invalid_cursor;
//   - unknown channel: channel_not_found; unknown ts: thread_not_found.
const (
	repliesDefaultLimit = 1000
	repliesMaxLimit     = 1000
)

// cursorPrefix marks the fake's cursors, which are opaque to the bot like Slack's.
const cursorPrefix = "next_ts:"

func (s *Server) conversationsReplies(p map[string]string) (map[string]any, string) {
	ch, ts := p["channel"], p["ts"]
	latest, ok := parseTS(p["latest"])
	if !ok {
		return nil, "invalid_ts_latest"
	}
	oldest, ok := parseTS(p["oldest"])
	if !ok {
		return nil, "invalid_ts_oldest"
	}
	inclusive := p["inclusive"] == "1" || p["inclusive"] == "true"
	limit := repliesDefaultLimit
	if l, err := strconv.Atoi(p["limit"]); err == nil && l > 0 {
		limit = min(l, repliesMaxLimit)
	}
	var from string // the first reply ts of this page ("" on the first page)
	if c := p["cursor"]; c != "" {
		raw, err := base64.StdEncoding.DecodeString(c)
		if err != nil || !strings.HasPrefix(string(raw), cursorPrefix) {
			return nil, "invalid_cursor"
		}
		from = strings.TrimPrefix(string(raw), cursorPrefix)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if ch == "" || len(s.messagesLocked(func(m *Message) bool { return m.Channel == ch })) == 0 {
		return nil, "channel_not_found"
	}
	m, found := s.messages[ch+"/"+ts]
	if !found {
		return nil, "thread_not_found"
	}
	rootTS := ts
	if m.ThreadTS != "" {
		rootTS = m.ThreadTS
	}
	root, found := s.messages[ch+"/"+rootTS]
	if !found {
		return nil, "thread_not_found"
	}
	replies := s.messagesLocked(func(m *Message) bool { return m.Channel == ch && m.ThreadTS == rootTS && m.TS != rootTS })
	inRange := func(m Message) bool {
		t, _ := parseTS(m.TS)
		switch {
		case latest != nil && (t.Cmp(latest) > 0 || (!inclusive && t.Cmp(latest) == 0)):
			return false
		case oldest != nil && (t.Cmp(oldest) < 0 || (!inclusive && t.Cmp(oldest) == 0)):
			return false
		}
		return true
	}
	var list []any
	if from == "" {
		list = append(list, wireRoot(root, replies))
	}
	next := ""
	for _, r := range replies {
		if (from != "" && r.TS < from) || !inRange(r) {
			continue
		}
		if len(list) == limit {
			next = base64.StdEncoding.EncodeToString([]byte(cursorPrefix + r.TS))
			break
		}
		list = append(list, wireMessage(&r))
	}
	return map[string]any{
		"messages": list, "has_more": next != "",
		"response_metadata": map[string]any{"next_cursor": next},
	}, ""
}

// parseTS reads a Slack timestamp ("1700000000.000100") exactly; "" is no bound (nil, true).
func parseTS(v string) (*big.Rat, bool) {
	if v == "" {
		return nil, true
	}
	r, ok := new(big.Rat).SetString(v)
	if !ok || r.Sign() < 0 {
		return nil, false
	}
	return r, true
}

// wireRoot is a thread's parent as conversations.replies shows it.
func wireRoot(root *Message, replies []Message) map[string]any {
	out := wireMessage(root)
	if len(replies) > 0 {
		users := map[string]bool{}
		for _, r := range replies {
			users[r.User] = true
		}
		out["thread_ts"] = root.TS
		out["reply_count"] = len(replies)
		out["reply_users_count"] = len(users)
		out["latest_reply"] = replies[len(replies)-1].TS
	}
	return out
}

func wireMessage(m *Message) map[string]any {
	out := map[string]any{"type": "message", "ts": m.TS, "text": m.Text}
	if m.User != "" {
		out["user"] = m.User
	}
	if m.ThreadTS != "" {
		out["thread_ts"] = m.ThreadTS
	}
	if m.BotID != "" {
		out["bot_id"] = m.BotID
	}
	if m.Username != "" {
		// Messages posted by other integrations (webhooks, alerting bots) name themselves.
		out["subtype"] = "bot_message"
		out["username"] = m.Username
	}
	if len(m.Edits) > 0 {
		out["edited"] = map[string]any{"user": m.User, "ts": m.TS}
	}
	return out
}

// BotPost records a message another integration (an alerting bot, an incoming webhook) posted: it
// has a bot_id and a username and no user, as Slack shows them. It delivers no event.
func (s *Server) BotPost(channel, botID, username, text string, opts ...MsgOption) Message {
	var spec msgSpec
	for _, o := range opts {
		o(&spec)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Message{Channel: channel, TS: s.nextTSLocked(), ThreadTS: spec.thread, BotID: botID, Username: username, Text: text}
	s.messages[channel+"/"+m.TS] = m
	s.changedLocked()
	return copyMessage(m)
}
