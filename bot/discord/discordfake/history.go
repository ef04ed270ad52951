package discordfake

import (
	"net/http"
	"slices"
	"strconv"
)

// getMessages is GET /channels/{channel}/messages: a channel's history, newest first, as Discord
// serves it. limit is 1-100 (default 50); before, after and around are message ids (snowflakes),
// and at most one of them may be given. before gives the newest messages older than it, after the
// oldest messages newer than it (still newest first), around the messages nearest it.
func (s *Server) getMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, codeTooLong, "Invalid Form Body: limit must be between 1 and 100")
			return
		}
		limit = n
	}
	given := 0
	for _, k := range []string{"before", "after", "around"} {
		if v := q.Get(k); v != "" {
			if _, err := strconv.ParseUint(v, 10, 64); err != nil {
				writeError(w, http.StatusBadRequest, codeTooLong, "Invalid Form Body: "+k+" is not a snowflake")
				return
			}
			given++
		}
	}
	if given > 1 {
		writeError(w, http.StatusBadRequest, codeTooLong, "Invalid Form Body: only one of before, after and around")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := r.PathValue("channel")
	if s.channels[ch] == nil {
		writeError(w, http.StatusNotFound, codeUnknownChannel, "Unknown Channel")
		return
	}
	all := slices.Clone(s.messages[ch]) // oldest first
	slices.SortFunc(all, func(a, b *Message) int { return cmpSnowflake(a.ID, b.ID) })
	var pick []*Message
	switch {
	case q.Get("before") != "":
		for _, m := range all {
			if cmpSnowflake(m.ID, q.Get("before")) < 0 {
				pick = append(pick, m)
			}
		}
		pick = pick[max(0, len(pick)-limit):]
	case q.Get("after") != "":
		for _, m := range all {
			if cmpSnowflake(m.ID, q.Get("after")) > 0 {
				pick = append(pick, m)
			}
		}
		pick = pick[:min(len(pick), limit)]
	case q.Get("around") != "":
		at, _ := slices.BinarySearchFunc(all, q.Get("around"), func(m *Message, id string) int { return cmpSnowflake(m.ID, id) })
		from := max(0, at-limit/2)
		pick = all[from:min(len(all), from+limit)]
	default:
		pick = all[max(0, len(all)-limit):]
	}
	out := make([]Message, 0, len(pick))
	for i := len(pick) - 1; i >= 0; i-- {
		out = append(out, *pick[i])
	}
	writeJSON(w, http.StatusOK, out)
}

// UserThread has user start a thread in a guild text channel, with no starter message (as from the
// "+" menu); it returns the thread's channel id. Nothing is dispatched: a bot learns of the thread
// when it is mentioned there.
func (s *Server) UserThread(parentID string, user User, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	pc := s.channels[parentID]
	if pc == nil {
		panic("discordfake: UserThread in unknown channel " + parentID)
	}
	return s.ensureChannelLocked(Channel{ID: s.idLocked(), Type: ChannelPublicThread, GuildID: pc.GuildID, ParentID: parentID, Name: name, OwnerID: user.ID}).ID
}
