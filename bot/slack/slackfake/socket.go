package slackfake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// ErrNoAck is returned by SendSocket when the bot did not acknowledge the envelope in time; Slack
// would then redeliver it with retry_attempt incremented.
var ErrNoAck = errors.New("slackfake: envelope not acknowledged")

// ErrNotConnected is returned when no Socket Mode connection is open.
var ErrNotConnected = errors.New("slackfake: no Socket Mode connection")

// upgrader accepts any Origin: slack-go dials with "Origin: https://api.slack.com".
var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// appsConnectionsOpen hands out a single-use WebSocket URL, as Slack does for every (re)connect.
func (s *Server) appsConnectionsOpen(map[string]string) (map[string]any, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ticket := s.nextIDLocked("tk")
	s.tickets[ticket] = true
	return map[string]any{"url": "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/link/?ticket=" + ticket}, ""
}

type wsConn struct {
	c    *websocket.Conn
	done chan struct{}
	once sync.Once
	// wmu serializes writes: gorilla/websocket allows one writer at a time.
	wmu sync.Mutex
}

func (c *wsConn) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.c.WriteJSON(v)
}

func (c *wsConn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.c.Close()
	})
}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	valid := s.tickets[ticket]
	delete(s.tickets, ticket)
	s.mu.Unlock()
	if !valid {
		http.Error(w, "invalid or used ticket", http.StatusUnauthorized)
		return
	}
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	conn := &wsConn{c: c, done: make(chan struct{})}
	hello := map[string]any{
		"type": "hello", "num_connections": 1,
		"debug_info":      map[string]any{"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": s.opts.AppID},
	}
	// Registered before the hello is written, and written under the connection's write lock: a
	// client that has read the hello can be sent events at once (as from Slack), and an event sent
	// meanwhile waits for the lock, so the hello still comes first on the wire.
	conn.wmu.Lock()
	s.mu.Lock()
	s.conns = append(s.conns, conn)
	s.opened++
	s.changedLocked()
	s.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	err = c.WriteJSON(hello)
	conn.wmu.Unlock()
	go s.pingLoop(conn)
	if err != nil {
		conn.close() // readAcks then fails at once and unregisters it
	}
	s.readAcks(conn)
}

// pingLoop sends WebSocket pings: slack-go treats a silent server as dead and reconnects.
func (s *Server) pingLoop(c *wsConn) {
	t := time.NewTicker(s.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.wmu.Lock()
			err := c.c.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(5*time.Second))
			c.wmu.Unlock()
			if err != nil {
				c.close()
				return
			}
		}
	}
}

func (s *Server) readAcks(c *wsConn) {
	defer func() {
		c.close()
		s.mu.Lock()
		for i, x := range s.conns {
			if x == c {
				s.conns = append(s.conns[:i], s.conns[i+1:]...)
				break
			}
		}
		s.changedLocked()
		s.mu.Unlock()
	}()
	for {
		_, data, err := c.c.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		a := Ack{EnvelopeID: ack.EnvelopeID, Payload: ack.Payload}
		s.mu.Lock()
		s.acks = append(s.acks, a)
		if ch, ok := s.waiters[a.EnvelopeID]; ok {
			delete(s.waiters, a.EnvelopeID)
			ch <- a
		}
		s.changedLocked()
		s.mu.Unlock()
	}
}

// Connected reports how many Socket Mode connections are open.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Opened reports how many Socket Mode connections were ever opened (reconnects count).
func (s *Server) Opened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// SocketOption adjusts one envelope.
type SocketOption func(map[string]any)

// SocketRetry marks the envelope as Slack's retry number n for reason (e.g. "timeout").
func SocketRetry(n int, reason string) SocketOption {
	return func(m map[string]any) { m["retry_attempt"], m["retry_reason"] = n, reason }
}

// SendSocket delivers ev as an events_api envelope on the newest connection and waits for its ack.
func (s *Server) SendSocket(ctx context.Context, ev Event, opts ...SocketOption) (Ack, error) {
	env := map[string]any{
		"type": "events_api", "payload": json.RawMessage(ev.Body),
		"accepts_response_payload": false, "retry_attempt": 0, "retry_reason": "",
	}
	for _, o := range opts {
		o(env)
	}
	return s.sendEnvelope(ctx, env)
}

// SendSocketCommand delivers a slash command as a slash_commands envelope and waits for its ack,
// whose payload is the command's immediate response.
func (s *Server) SendSocketCommand(ctx context.Context, cmd SlashCommand) (Ack, error) {
	form := s.commandForm(cmd)
	payload := map[string]any{}
	for k, v := range form {
		payload[k] = v[0]
	}
	payload["is_enterprise_install"] = "false"
	return s.sendEnvelope(ctx, map[string]any{"type": "slash_commands", "payload": payload, "accepts_response_payload": true})
}

// SendSocketRaw writes one frame as is (for malformed-envelope tests) and does not wait for an ack.
func (s *Server) SendSocketRaw(ctx context.Context, frame json.RawMessage) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	return c.write(frame)
}

// Disconnect asks the client to reconnect, as Slack does before rotating a connection.
func (s *Server) Disconnect(reason string) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	return c.write(map[string]any{"type": "disconnect", "reason": reason, "debug_info": map[string]any{"host": "applink-fake"}})
}

func (s *Server) conn() (*wsConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) == 0 {
		return nil, ErrNotConnected
	}
	return s.conns[len(s.conns)-1], nil
}

func (s *Server) sendEnvelope(ctx context.Context, env map[string]any) (Ack, error) {
	c, err := s.conn()
	if err != nil {
		return Ack{}, err
	}
	ch := make(chan Ack, 1)
	s.mu.Lock()
	id := fmt.Sprintf("%08x-fake-%04x", s.seq+1, s.seq+1)
	s.seq++
	s.waiters[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, id)
		s.mu.Unlock()
	}()
	env["envelope_id"] = id
	if err := c.write(env); err != nil {
		return Ack{}, fmt.Errorf("slackfake: writing envelope: %w", err)
	}
	t := time.NewTimer(s.opts.AckTimeout)
	defer t.Stop()
	select {
	case a := <-ch:
		return a, nil
	case <-t.C:
		return Ack{EnvelopeID: id}, ErrNoAck
	case <-ctx.Done():
		return Ack{EnvelopeID: id}, ctx.Err()
	}
}

// WaitConnected blocks until a Socket Mode connection is open.
func (s *Server) WaitConnected(ctx context.Context) error {
	return s.Wait(ctx, func() bool { return s.Connected() > 0 })
}
