package sandboxagent

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sse"
	"github.com/threadbox/threadbox/sandbox"
)

// ACP (Agent Client Protocol) JSON-RPC over sandbox-agent's HTTP transport: POST /v1/acp/{server}
// carries one envelope (a request's response comes back inline), GET /v1/acp/{server} streams every
// envelope from the agent, responses included, as SSE with sequential ids.

// message is any JSON-RPC envelope.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error. sandbox-agent puts the agent's stderr in data.agentStderr (noise
// from earlier calls too): it is never shown to users.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    struct {
		ErrorName string `json:"errorName"`
	} `json:"data"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("ACP error %d: %s", e.Code, e.Message) }

// newID returns a request id no other call uses, so that its echo on the event stream is ours.
func newID(kind string) string { return "tb-" + kind + "-" + strings.ToLower(rand.Text()[:12]) }

// acpPath names our ACP server; ?agent= on every POST lets the first one (after any server restart)
// spawn the agent process.
func (r *Runtime) acpPath() string {
	return "/v1/acp/" + url.PathEscape(r.serverID()) + "?agent=" + url.QueryEscape(r.cfg.Agent)
}

func (r *Runtime) serverID() string { return "threadbox-" + r.cfg.Agent }

// call sends a request and returns its response envelope (which may carry a JSON-RPC error).
func (r *Runtime) call(ctx context.Context, sb sandbox.Sandbox, id, method string, params any) (*message, error) {
	raw, _ := json.Marshal(id)
	var resp message
	if _, err := r.request(ctx, sb, http.MethodPost, r.acpPath(), rpcEnvelope(raw, method, params), &resp); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return &resp, nil
}

// callResult sends a request and decodes its result into out; a JSON-RPC error is returned as one.
func (r *Runtime) callResult(ctx context.Context, sb sandbox.Sandbox, method string, params, out any) error {
	resp, err := r.call(ctx, sb, newID("call"), method, params)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return fmt.Errorf("%s: %w", method, resp.Error)
	}
	if out != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("%s: decoding the result: %w", method, err)
		}
	}
	return nil
}

// notify sends a notification (no id, no response).
func (r *Runtime) notify(ctx context.Context, sb sandbox.Sandbox, method string, params any) error {
	if _, err := r.request(ctx, sb, http.MethodPost, r.acpPath(), rpcEnvelope(nil, method, params), nil); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// respond answers a request the agent sent us.
func (r *Runtime) respond(ctx context.Context, sb sandbox.Sandbox, id json.RawMessage, result any) error {
	b, _ := json.Marshal(result)
	_, err := r.request(ctx, sb, http.MethodPost, r.acpPath(), message{JSONRPC: "2.0", ID: id, Result: b}, nil)
	return err
}

func rpcEnvelope(id json.RawMessage, method string, params any) map[string]any {
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != nil {
		m["id"] = id
	}
	if params != nil {
		m["params"] = params
	}
	return m
}

// frame is one event of the stream: its sequence id and envelope.
type frame struct {
	id  string
	msg message
}

// stream is a live subscription to the agent's envelopes, pumped into c by one goroutine.
type stream struct {
	c      chan frame
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex // protects failed
	failed error
}

// subscribe opens the event stream after lastID ("" replays what the server still buffers). The
// stream outlives ctx (after a cancel it still tells when the turn really ended), but until the
// server answers ctx bounds the wait: a server that never does must not hold a turn whose caller
// gave up.
func (r *Runtime) subscribe(callerCtx context.Context, sb sandbox.Sandbox, lastID string) (*stream, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(callerCtx))
	stopWatch := context.AfterFunc(callerCtx, cancel)
	defer stopWatch()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox-agent/v1/acp/"+url.PathEscape(r.serverID()), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+Token(r.cfg.Secret, sb.Handle().ID))
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := r.clients.Get(sb).Do(req)
	if err != nil {
		cancel()
		r.clients.Reset(sb)
		if callerCtx.Err() != nil {
			return nil, fmt.Errorf("sandbox-agent: subscribing to events: %w", context.Cause(callerCtx))
		}
		return nil, fmt.Errorf("sandbox-agent: subscribing to events: %w: %w", runtime.ErrSandboxDown, err)
	}
	if !stopWatch() && callerCtx.Err() != nil {
		// ctx ended just as the server answered: the stream is cancelled already.
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("sandbox-agent: subscribing to events: %w", context.Cause(callerCtx))
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("sandbox-agent: subscribing to events: %s: %s: %w", resp.Status, strings.TrimSpace(string(msg)), subscribeClass(resp.StatusCode))
	}
	s := &stream{c: make(chan frame, 64), cancel: cancel, done: make(chan struct{})}
	go s.pump(ctx, resp.Body)
	return s, nil
}

// subscribeClass is the class of a refused subscription. Only a 404 says the ACP server is gone (the
// sandbox-agent process restarted since Session), and its sessions with it; a server error is the
// sandbox failing (re-resolve it, keep the session); anything else is neither, and retrying would
// meet it again.
func subscribeClass(status int) error {
	switch {
	case status == http.StatusNotFound:
		return runtime.ErrSessionMissing
	case status == http.StatusUnauthorized:
		return errUnauthorized
	case status >= 500:
		return runtime.ErrSandboxDown
	}
	return errRefused
}

// errRefused is a subscription refused for a reason that is no recovery class.
var errRefused = errors.New("refused")

func (s *stream) pump(ctx context.Context, body io.ReadCloser) {
	defer close(s.done)
	defer close(s.c)
	defer body.Close()
	rd := sse.NewReader(body, 0)
	for {
		ev, err := rd.Next()
		if err != nil {
			s.mu.Lock()
			s.failed = err
			s.mu.Unlock()
			return
		}
		f := frame{id: ev.ID}
		if json.Unmarshal(ev.Data, &f.msg) != nil {
			continue
		}
		select {
		case s.c <- f:
		case <-ctx.Done():
			return
		}
	}
}

func (s *stream) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// ended explains a stream that closed before the prompt was sent: a sandbox-down error, which makes
// the pool re-resolve and retry, unless an event was over its cap, which a retry would meet again.
// (Once the prompt is sent, a stream that closes is followed again: resume.)
func (s *stream) ended() error {
	err := s.err()
	if errors.Is(err, sandbox.ErrTooLarge) {
		return fmt.Errorf("sandbox-agent: the event stream: %w", err)
	}
	return fmt.Errorf("sandbox-agent: the event stream ended: %w: %w", runtime.ErrSandboxDown, err)
}

func (s *stream) close() {
	s.cancel()
	<-s.done
}
