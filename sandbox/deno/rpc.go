package deno

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// errConnLost: the socket closed. The sandbox may be alive ("session missing": reconnect) or gone
// (its deadline passed, or it was killed): the caller tells them apart by asking the console.
var errConnLost = errors.New("deno: sandbox connection closed")

// maxRPCMessage bounds one message from the sandbox's socket; a larger one ends the connection.
// The sandbox chooses what it sends, so without it one message could take the host's memory.
// (ReadFile does not use Deno's readFile, whose answer is the whole file in one message: it reads a
// bounded count of bytes through an output stream.)
const maxRPCMessage = 64 << 20

// RemoteError is an error thrown inside the sandbox (the result union's error, an ErrObj).
type RemoteError struct {
	Method, Ctor, Code, Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("deno: %s: %s: %s", e.Method, e.Ctor, e.Message)
}

// Unwrap maps Deno's error classes onto io/fs errors.
func (e *RemoteError) Unwrap() error {
	switch e.Ctor {
	case "NotFound":
		return fs.ErrNotExist
	case "AlreadyExists":
		return fs.ErrExist
	case "PermissionDenied":
		return fs.ErrPermission
	}
	return nil
}

// rpcConn is one WebSocket to a sandbox, speaking JSON-RPC 2.0 with byte streams as notifications
// (cloud-apis.md §2.5). One goroutine reads and dispatches; writes are serialised.
type rpcConn struct {
	ws        *websocket.Conn
	sandboxID string
	done      chan struct{} // closed when the socket is gone

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex // protects the following
	nextID  int64
	pending map[int64]chan rpcAnswer
	streams map[int]*inStream // server → client, by id
	outSeq  int
	err     error
}

type rpcAnswer struct {
	result json.RawMessage
	err    error
}

// dialRPC opens the socket; header carries auth (and the config, for create). It returns the
// sandbox id from the handshake's x-deno-sandbox-id.
func (p *Provider) dialRPC(ctx context.Context, op, rawURL string, header http.Header) (*rpcConn, error) {
	d := websocket.Dialer{HandshakeTimeout: p.opts.BootTimeout, Proxy: http.ProxyFromEnvironment}
	ws, resp, err := d.DialContext(ctx, rawURL, header)
	if err != nil {
		if resp != nil {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			return nil, apiErr(op, resp.StatusCode, data)
		}
		return nil, &transportError{fmt.Errorf("deno: %s: %w", op, err)}
	}
	id := resp.Header.Get("x-deno-sandbox-id")
	if id == "" {
		_ = ws.Close()
		return nil, fmt.Errorf("deno: %s: the handshake carried no x-deno-sandbox-id", op)
	}
	ws.SetReadLimit(maxRPCMessage)
	c := &rpcConn{ws: ws, sandboxID: id, done: make(chan struct{}), pending: map[int64]chan rpcAnswer{}, streams: map[int]*inStream{}}
	go c.read()
	go c.keepalive()
	return c, nil
}

func (c *rpcConn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *rpcConn) close() { _ = c.ws.Close() }

// keepalive sends the literal "ping" every 2 s, as the SDK does.
func (c *rpcConn) keepalive() {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if c.write([]byte("ping")) != nil {
				return
			}
		}
	}
}

func (c *rpcConn) write(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(time.Minute))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

func (c *rpcConn) read() {
	var err error
	defer func() {
		c.mu.Lock()
		c.err = fmt.Errorf("%w: %w", errConnLost, err)
		for id, ch := range c.pending {
			ch <- rpcAnswer{err: c.err}
			delete(c.pending, id)
		}
		for _, s := range c.streams {
			s.finish(c.err)
		}
		c.mu.Unlock()
		close(c.done)
		_ = c.ws.Close()
	}()
	for {
		var data []byte
		if _, data, err = c.ws.ReadMessage(); err != nil {
			return
		}
		if string(data) == "pong" {
			continue
		}
		var m struct {
			ID     *int64          `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &m) != nil {
			continue // not ours to judge; the server closes on bad frames, we ignore them
		}
		if m.ID == nil {
			c.notification(m.Method, m.Params)
			continue
		}
		c.mu.Lock()
		ch := c.pending[*m.ID]
		delete(c.pending, *m.ID)
		c.mu.Unlock()
		if ch == nil {
			continue
		}
		if m.Error != nil {
			ch <- rpcAnswer{err: fmt.Errorf("deno: JSON-RPC error %d: %s", m.Error.Code, clip(m.Error.Message))}
		} else {
			ch <- rpcAnswer{result: m.Result}
		}
	}
}

func (c *rpcConn) notification(method string, raw json.RawMessage) {
	var p struct {
		StreamID int    `json:"streamId"`
		Data     string `json:"data"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return
	}
	s := c.stream(p.StreamID)
	switch method {
	case "$sandbox.stream.enqueue":
		data, err := base64.StdEncoding.DecodeString(p.Data)
		if err == nil {
			s.put(data)
		}
	case "$sandbox.stream.end":
		s.finish(nil)
	case "$sandbox.stream.error":
		s.finish(errors.New("deno: stream error"))
	}
}

// stream returns the inbound stream id, creating it: messages may arrive before the RPC result
// that names the stream, so they are held until it is claimed.
func (c *rpcConn) stream(id int) *inStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[id]
	if s == nil {
		s = &inStream{done: make(chan struct{})}
		c.streams[id] = s
		if c.err != nil {
			s.finish(c.err)
		}
	}
	return s
}

// claim attaches sink to stream id and forgets the id once it ends.
func (c *rpcConn) claim(id int, sink io.Writer) *inStream {
	s := c.stream(id)
	s.attach(sink)
	go func() {
		<-s.done
		c.mu.Lock()
		delete(c.streams, id)
		c.mu.Unlock()
	}()
	return s
}

// call sends a request and decodes the ok value into out. afterSend, if set, runs once the request
// is on the wire (to pump a client stream the request refers to).
func (c *rpcConn) call(ctx context.Context, method string, params, out any, afterSend func()) error {
	ch := make(chan rpcAnswer, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	id := c.nextID
	c.nextID++
	c.pending[id] = ch
	c.mu.Unlock()
	data, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := c.write(data); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("%w: %w", errConnLost, err)
	}
	if afterSend != nil {
		afterSend()
	}
	var a rpcAnswer
	select {
	case a = <-ch:
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return ctx.Err()
	}
	if a.err != nil {
		return a.err
	}
	var union struct {
		OK    json.RawMessage `json:"ok"`
		Error *struct {
			ConstructorName string  `json:"constructorName"`
			Message         string  `json:"message"`
			Code            *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.result, &union); err != nil {
		return fmt.Errorf("deno: %s: decode result: %w", method, err)
	}
	if union.Error != nil {
		// What the sandbox threw is the sandbox's to choose: cut it before it reaches our errors.
		re := &RemoteError{Method: method, Ctor: clip(union.Error.ConstructorName), Message: clip(union.Error.Message)}
		if union.Error.Code != nil {
			re.Code = clip(*union.Error.Code)
		}
		return re
	}
	if out != nil && len(union.OK) > 0 && !bytes.Equal(union.OK, []byte("null")) {
		if err := json.Unmarshal(union.OK, out); err != nil {
			return fmt.Errorf("deno: %s: decode ok value: %w", method, err)
		}
	}
	return nil
}

// startStream announces a client stream and returns its id and a function that pumps r into it
// (call it after the request that names the stream is sent).
func (c *rpcConn) startStream(r io.Reader) (int, func(), error) {
	c.mu.Lock()
	id := c.outSeq
	c.outSeq++
	c.mu.Unlock()
	note := func(method string, params any) error {
		data, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
		if err != nil {
			return err
		}
		return c.write(data)
	}
	if err := note("$sandbox.stream.start", map[string]int{"streamId": id}); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", errConnLost, err)
	}
	pump := func() {
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					if note("$sandbox.stream.enqueue", map[string]any{"streamId": id, "data": base64.StdEncoding.EncodeToString(buf[:n])}) != nil {
						return
					}
				}
				if err != nil {
					if errors.Is(err, io.EOF) {
						_ = note("$sandbox.stream.end", map[string]int{"streamId": id})
					} else {
						_ = note("$sandbox.stream.error", map[string]any{"streamId": id, "error": nil})
					}
					return
				}
			}
		}()
	}
	return id, pump, nil
}

// inStream is a server → client stream: bytes go to the sink once attached, held until then.
type inStream struct {
	mu   sync.Mutex
	sink io.Writer
	held [][]byte
	done chan struct{}
	err  error
	once sync.Once
}

func (s *inStream) put(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sink == nil {
		s.held = append(s.held, b)
		return
	}
	_, _ = s.sink.Write(b)
}

func (s *inStream) attach(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink = w
	for _, b := range s.held {
		_, _ = w.Write(b)
	}
	s.held = nil
}

func (s *inStream) finish(err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	})
}
