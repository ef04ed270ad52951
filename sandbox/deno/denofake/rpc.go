package denofake

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/gorilla/websocket"
)

// conn is one WebSocket connection to a sandbox (cloud-apis.md §2.5).
type conn struct {
	f  *Fake
	b  *box
	ws *websocket.Conn

	wmu sync.Mutex // serialises writes

	mu        sync.Mutex // protects the following
	inbound   map[int]*pipe
	outSeq    int
	cancelled map[int]bool
	closed    bool
}

type rpcMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      *int64          `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// Close codes (cloud-apis.md §2.5).
const (
	closeInvalidJSON    = 4000
	closeInvalidJSONRPC = 4001
)

func (f *Fake) serveSocket(w http.ResponseWriter, r *http.Request, b *box) {
	hdr := http.Header{"x-deno-sandbox-id": {b.id}, "x-deno-trace-id": {newResID("trc")}}
	ws, err := upgrader.Upgrade(w, r, hdr)
	if err != nil {
		return // Upgrade answered the client
	}
	c := &conn{f: f, b: b, ws: ws, inbound: map[int]*pipe{}, cancelled: map[int]bool{}}
	f.mu.Lock()
	if b.status != "running" {
		f.mu.Unlock()
		c.close(websocket.CloseNormalClosure, "sandbox stopped")
		return
	}
	b.conns[c] = true
	f.mu.Unlock()
	f.goBackground(func(context.Context) { c.serve() })
}

func (c *conn) serve() {
	defer func() {
		c.f.mu.Lock()
		delete(c.b.conns, c)
		c.f.mu.Unlock()
		c.mu.Lock()
		c.closed = true
		for _, p := range c.inbound {
			p.closeWith(errors.New("connection closed"))
		}
		c.mu.Unlock()
		_ = c.ws.Close()
	}()
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		if string(data) == "ping" {
			c.writeRaw([]byte("pong"))
			continue
		}
		var m rpcMsg
		if err := json.Unmarshal(data, &m); err != nil {
			c.close(closeInvalidJSON, "invalid JSON")
			return
		}
		if m.JSONRPC != "2.0" || m.Method == "" {
			c.close(closeInvalidJSONRPC, "invalid JSON-RPC")
			return
		}
		if m.ID == nil {
			c.notification(m.Method, m.Params)
			continue
		}
		id := *m.ID
		c.f.goBackground(func(ctx context.Context) {
			res, rerr := c.call(ctx, m.Method, m.Params)
			out := map[string]any{"jsonrpc": "2.0", "id": id}
			if rerr != nil {
				out["error"] = rerr
			} else {
				out["result"] = res
			}
			c.write(out)
		})
	}
}

func (c *conn) writeRaw(data []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.WriteMessage(websocket.TextMessage, data)
}

func (c *conn) write(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	c.writeRaw(data)
}

func (c *conn) notify(method string, params any) {
	c.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

func (c *conn) close(code int, reason string) {
	c.wmu.Lock()
	_ = c.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason))
	c.wmu.Unlock()
	_ = c.ws.Close()
}

// notification handles the client's stream messages.
func (c *conn) notification(method string, raw json.RawMessage) {
	var p struct {
		StreamID int    `json:"streamId"`
		Data     string `json:"data"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		c.close(closeInvalidJSONRPC, "invalid params")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch method {
	case "$sandbox.stream.start":
		c.inbound[p.StreamID] = newPipe()
	case "$sandbox.stream.enqueue":
		data, err := base64.StdEncoding.DecodeString(p.Data)
		if pp := c.inbound[p.StreamID]; pp != nil && err == nil {
			pp.write(data)
		}
	case "$sandbox.stream.end", "$sandbox.stream.error":
		// A stream that ends before a request claimed it is held, bytes and end, until one does
		// (cloud-apis.md §2.5): a short stdin is over before its spawn is handled.
		if pp := c.inbound[p.StreamID]; pp != nil {
			if method == "$sandbox.stream.end" {
				pp.closeWith(io.EOF)
			} else {
				pp.closeWith(errors.New("stream error"))
			}
			if pp.claimed {
				delete(c.inbound, p.StreamID)
			}
		}
	case "$sandbox.stream.cancel":
		c.cancelled[p.StreamID] = true
	}
}

// outStream is a server → client byte stream.
type outStream struct {
	c  *conn
	id int
}

func (c *conn) newOut() *outStream {
	c.mu.Lock()
	c.outSeq++
	id := c.outSeq
	c.mu.Unlock()
	c.notify("$sandbox.stream.start", map[string]int{"streamId": id})
	return &outStream{c: c, id: id}
}

func (s *outStream) Write(p []byte) (int, error) {
	s.c.mu.Lock()
	stop := s.c.cancelled[s.id] || s.c.closed
	s.c.mu.Unlock()
	if !stop && len(p) > 0 {
		s.c.notify("$sandbox.stream.enqueue", map[string]any{"streamId": s.id, "data": base64.StdEncoding.EncodeToString(p)})
	}
	return len(p), nil
}

func (s *outStream) end() { s.c.notify("$sandbox.stream.end", map[string]int{"streamId": s.id}) }

// rpcError is a JSON-RPC protocol error.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// errObj is Deno's serialised error, answered as {"error": errObj} inside the result union.
type errObj struct {
	ConstructorName string  `json:"constructorName"`
	Message         string  `json:"message"`
	Code            *string `json:"code"`
	Stack           *string `json:"stack"`
	Name            *string `json:"name"`
	Cause           any     `json:"cause"`
	Errors          any     `json:"errors"`
	Err             any     `json:"error"`
	Suppressed      any     `json:"suppressed"`
}

func (e *errObj) Error() string { return e.ConstructorName + ": " + e.Message }

func newErrObj(ctor, code, msg string) *errObj {
	o := &errObj{ConstructorName: ctor, Message: msg, Name: &ctor}
	if code != "" {
		o.Code = &code
	}
	return o
}

// call runs one method and returns the result union, or a protocol error.
func (c *conn) call(ctx context.Context, method string, raw json.RawMessage) (any, *rpcError) {
	h, ok := methods[method]
	if !ok {
		return nil, &rpcError{Code: -32601, Message: "Method not found: " + method}
	}
	v, err := h(ctx, c, raw)
	var perr *paramsError
	var eo *errObj
	switch {
	case err == nil:
		return map[string]any{"ok": v}, nil
	case errors.As(err, &perr):
		return nil, &rpcError{Code: -32602, Message: "Invalid params: " + perr.Error()}
	case errors.As(err, &eo):
		return map[string]any{"error": eo}, nil
	}
	return map[string]any{"error": newErrObj("Error", "", err.Error())}, nil
}

type paramsError struct{ err error }

func (e *paramsError) Error() string { return e.err.Error() }

// params decodes strictly: unknown fields are invalid params, as the SDK's zod schemas are strict.
func params(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &paramsError{err}
	}
	return nil
}

// pipe is an unbounded in-memory pipe for client streams, so the reader loop never blocks.
type pipe struct {
	mu   sync.Mutex
	cond *sync.Cond
	buf  []byte
	err  error
	// claimed is set (under conn.mu) once a request has taken the stream.
	claimed bool
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *pipe) write(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.buf = append(p.buf, b...)
		p.cond.Broadcast()
	}
}

func (p *pipe) closeWith(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		p.cond.Broadcast()
	}
}

// ended reports whether the stream's writer is done with it.
func (p *pipe) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err != nil
}

func (p *pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && p.err == nil {
		p.cond.Wait()
	}
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		return n, nil
	}
	return 0, p.err
}

func (c *conn) inboundStream(id *int) (*pipe, error) {
	if id == nil {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.inbound[*id]
	if p == nil || p.claimed {
		return nil, &paramsError{fmt.Errorf("stream %d was not started, or is already used", *id)}
	}
	p.claimed = true
	if p.ended() {
		delete(c.inbound, *id) // its end came before the claim
	}
	return p, nil
}
