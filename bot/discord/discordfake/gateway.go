package discordfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// The gateway: one WebSocket per connection, sessions that outlive their connection (for Resume),
// and dispatches numbered per session. Frames are queued under Server.mu (so their order is the
// sequence order) and written by one goroutine per connection.

// gateway is the gateway's state; Server.mu protects it.
type gateway struct {
	sessions map[string]*gwSession
	// current is the last session identified: dispatches go to it.
	current *gwSession
	conns   map[*gwConn]bool
	// pending holds dispatches made before any session existed.
	pending []frame
	// replayFrom, when set, makes the next Resume replay from this sequence instead of the client's
	// (Discord delivers at least once).
	replayFrom int64
	identifies int
	resumes    int
	heartbeats int
	intents    int
}

func (g *gateway) init() {
	g.sessions = map[string]*gwSession{}
	g.conns = map[*gwConn]bool{}
}

type gwSession struct {
	id   string
	seq  int64
	log  []frame
	conn *gwConn
}

type frame struct {
	Op   int             `json:"op"`
	D    json.RawMessage `json:"d"`
	S    *int64          `json:"s"`
	T    *string         `json:"t"`
	data []byte
}

type gwConn struct {
	ws   *websocket.Conn
	out  chan []byte
	dead bool
}

// sendLocked queues a frame for the connection; a connection that cannot keep up is dropped.
// Callers hold Server.mu.
func (c *gwConn) sendLocked(b []byte) {
	if c.dead {
		return
	}
	select {
	case c.out <- b:
	default:
		c.killLocked()
	}
}

func (c *gwConn) killLocked() {
	if !c.dead {
		c.dead = true
		close(c.out)
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only the fake's own values are marshalled
	}
	return b
}

func opFrame(op int, d any) []byte {
	return mustJSON(map[string]any{"op": op, "d": d, "s": nil, "t": nil})
}

// dispatchLocked numbers a dispatch in the session and sends it. Callers hold Server.mu.
func (s *Server) dispatchLocked(sess *gwSession, t string, d any) {
	sess.seq++
	seq := sess.seq
	f := frame{Op: 0, D: mustJSON(d), S: &seq, T: &t}
	f.data = mustJSON(f)
	sess.log = append(sess.log, f)
	if sess.conn != nil {
		sess.conn.sendLocked(f.data)
	}
	s.notifyLocked()
}

// Dispatch sends an event (MESSAGE_CREATE, INTERACTION_CREATE, …) to the bot's session; before any
// session exists it is held and sent after READY.
func (s *Server) Dispatch(t string, d any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatchOrHoldLocked(t, d)
}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &gwConn{ws: ws, out: make(chan []byte, 4096)}
	s.mu.Lock()
	s.gw.conns[c] = true
	c.sendLocked(opFrame(10, map[string]any{"heartbeat_interval": s.opts.HeartbeatInterval.Milliseconds()}))
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range c.out {
			if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
				_ = ws.Close()
				return
			}
		}
		// The connection was dropped on purpose (DropConnections) or fell behind: no close frame.
		_ = ws.Close()
	}()
	s.readGateway(c)
	s.mu.Lock()
	c.killLocked()
	delete(s.gw.conns, c)
	for _, sess := range s.gw.sessions {
		if sess.conn == c {
			sess.conn = nil
		}
	}
	s.notifyLocked()
	s.mu.Unlock()
	<-done
}

// readGateway serves one connection's client frames until it fails or closes.
func (s *Server) readGateway(c *gwConn) {
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var f struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if json.Unmarshal(data, &f) != nil {
			_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4002, "Error while decoding payload."), time.Now().Add(time.Second))
			return
		}
		switch f.Op {
		case 1:
			s.mu.Lock()
			s.gw.heartbeats++
			c.sendLocked(opFrame(11, nil))
			s.notifyLocked()
			s.mu.Unlock()
		case 2:
			if !s.identify(c, f.D) {
				return
			}
		case 6:
			s.resume(c, f.D)
		}
	}
}

func (s *Server) identify(c *gwConn, d json.RawMessage) bool {
	var id struct {
		Token   string `json:"token"`
		Intents int    `json:"intents"`
	}
	_ = json.Unmarshal(d, &id)
	if strings.TrimPrefix(id.Token, "Bot ") != s.opts.BotToken {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4004, "Authentication failed."), time.Now().Add(time.Second))
		return false
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := &gwSession{id: hex.EncodeToString(b[:]), conn: c}
	for _, old := range s.gw.sessions {
		if old.conn == c {
			old.conn = nil // op 9 then Identify on the same socket: the old session is gone
		}
	}
	s.gw.sessions[sess.id] = sess
	s.gw.current = sess
	s.gw.identifies++
	s.gw.intents = id.Intents
	s.dispatchLocked(sess, "READY", map[string]any{
		"v": 10, "user": s.BotUser(), "session_id": sess.id, "resume_gateway_url": "ws://" + s.Host() + "/gateway",
		"application": map[string]any{"id": s.opts.AppID, "flags": 0}, "guilds": []any{},
	})
	for _, p := range s.gw.pending {
		s.dispatchLocked(sess, *p.T, p.D)
	}
	s.gw.pending = nil
	return true
}

func (s *Server) resume(c *gwConn, d json.RawMessage) {
	var rs struct {
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
		Token     string `json:"token"`
	}
	_ = json.Unmarshal(d, &rs)
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.gw.sessions[rs.SessionID]
	if sess == nil || strings.TrimPrefix(rs.Token, "Bot ") != s.opts.BotToken {
		c.sendLocked(opFrame(9, false))
		return
	}
	from := rs.Seq
	if s.gw.replayFrom > 0 {
		from, s.gw.replayFrom = s.gw.replayFrom, 0
	}
	if sess.conn != nil && sess.conn != c {
		sess.conn.killLocked()
	}
	sess.conn = c
	s.gw.resumes++
	for _, f := range sess.log {
		if *f.S > from {
			c.sendLocked(f.data)
		}
	}
	s.dispatchLocked(sess, "RESUMED", map[string]any{})
}

// Reconnect sends op 7 (Reconnect) on every connection: the client must resume on a new one.
func (s *Server) Reconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.gw.conns {
		c.sendLocked(opFrame(7, nil))
	}
}

// InvalidSession sends op 9; a session that is not resumable is forgotten, so the client must
// identify again.
func (s *Server) InvalidSession(resumable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.gw.conns {
		c.sendLocked(opFrame(9, resumable))
	}
	if !resumable && s.gw.current != nil {
		delete(s.gw.sessions, s.gw.current.id)
	}
}

// DropConnections closes every gateway socket without a close frame, as a network failure would.
func (s *Server) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.gw.conns {
		c.killLocked()
	}
}

// ReplayOnNextResume makes the next Resume replay every dispatch after seq, even those the client
// acknowledged: Discord delivers at least once, and a bot must not act twice on a replay.
func (s *Server) ReplayOnNextResume(seq int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gw.replayFrom = seq
}

// GatewayStats are the gateway's counters.
type GatewayStats struct {
	Identifies, Resumes, Heartbeats int
	// Intents are the last Identify's.
	Intents int
	// Connected reports whether the current session has a live connection.
	Connected bool
	// Seq is the current session's last sequence number.
	Seq int64
}

// Gateway returns the gateway's counters.
func (s *Server) Gateway() GatewayStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := GatewayStats{Identifies: s.gw.identifies, Resumes: s.gw.resumes, Heartbeats: s.gw.heartbeats, Intents: s.gw.intents}
	if cur := s.gw.current; cur != nil {
		st.Connected, st.Seq = cur.conn != nil && !cur.conn.dead, cur.seq
	}
	return st
}

// WaitConnected waits until a session is identified (or resumed) on a live connection.
func (s *Server) WaitConnected(ctx context.Context) error {
	return s.Wait(ctx, func() bool { return s.Gateway().Connected })
}
