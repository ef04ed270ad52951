// Package sandboxhttp is the HTTP side shared by the runtimes whose agent serves HTTP inside the
// sandbox (opencode, sandbox-agent): a cache of clients that dial through the provider, and JSON calls
// whose failures are classified the way the pool expects.
package sandboxhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
)

// ErrUnauthorized is a 401 answer; callers report it as their own error.
var ErrUnauthorized = errors.New("unauthorized")

// ErrSentUnanswered marks a call that failed after the whole request went out (the connection was cut,
// or no answer came): the server may have acted on it. Do still reports it as runtime.ErrSandboxDown,
// which is right for a read; a caller whose request starts the agent's work (a prompt) must not send
// it again.
var ErrSentUnanswered = errors.New("the request was sent and not answered")

// MaxClients bounds the cache; past it, the idle connections of all sandboxes are dropped.
const MaxClients = 256

// MaxBodyBytes bounds a JSON answer from a server in a sandbox. The largest are opencode's message
// lists, which hold a turn's answer and tool outputs; a 10 MB answer fits.
const MaxBodyBytes = 32 << 20

// Clients keeps one HTTP client per sandbox. Each connection is a tunnel through the provider (an exec
// in the sandbox for Docker), so reusing idle ones saves that setup on every call of a turn.
type Clients struct {
	// Port is the server's port on the sandbox's loopback.
	Port int
	// ResponseHeaderTimeout bounds the wait for an answer's headers; zero leaves it to the context.
	ResponseHeaderTimeout time.Duration
	// AcceptedIsEmpty: a 202 answer has no body to decode.
	AcceptedIsEmpty bool
	// MaxBody bounds a decoded answer (0: MaxBodyBytes); a bigger one fails with sandbox.ErrTooLarge.
	MaxBody int64

	mu sync.Mutex // protects m and unanswered
	m  map[string]*http.Client
	// unanswered lists the sandboxes whose server accepted a call and never answered it (within
	// ResponseHeaderTimeout): its health check may still pass, so the caller's Ensure asks here.
	unanswered map[string]bool
}

// Unanswered reports whether a call to sb's server went unanswered since the last Answered.
func (c *Clients) Unanswered(sb sandbox.Sandbox) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unanswered[sb.Handle().ID]
}

// Answered clears Unanswered, once the server was restarted.
func (c *Clients) Answered(sb sandbox.Sandbox) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.unanswered, sb.Handle().ID)
}

func (c *Clients) markUnanswered(sb sandbox.Sandbox) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unanswered == nil || len(c.unanswered) >= MaxClients {
		c.unanswered = map[string]bool{}
	}
	c.unanswered[sb.Handle().ID] = true
}

// Get returns the client of sb.
func (c *Clients) Get(sb sandbox.Sandbox) *http.Client {
	id := sb.Handle().ID
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc, ok := c.m[id]; ok {
		return hc
	}
	if c.m == nil {
		c.m = map[string]*http.Client{}
	}
	if len(c.m) >= MaxClients {
		for _, hc := range c.m {
			hc.CloseIdleConnections()
		}
		clear(c.m)
	}
	port := c.Port
	hc := &http.Client{Transport: &http.Transport{
		DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return sb.Dial(ctx, port) },
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       time.Minute,
		ResponseHeaderTimeout: c.ResponseHeaderTimeout,
	}}
	c.m[id] = hc
	return hc
}

// Reset drops a sandbox's idle connections, after a failure or a restart of its server.
func (c *Clients) Reset(sb sandbox.Sandbox) {
	c.mu.Lock()
	hc := c.m[sb.Handle().ID]
	c.mu.Unlock()
	if hc != nil {
		hc.CloseIdleConnections()
	}
}

// NewRequest builds a call with in (when not nil) as its JSON body.
func NewRequest(ctx context.Context, method, url string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// Do sends req to the server in sb and decodes a 2xx JSON answer into out. Failures are classified:
// no answer at all or a 5xx is runtime.ErrSandboxDown (the pool re-resolves), and no answer to a
// request that went out whole also ErrSentUnanswered; 401 is ErrUnauthorized; the status is returned
// for the caller's own cases (404).
func (c *Clients) Do(sb sandbox.Sandbox, req *http.Request, out any) (int, error) {
	ctx := req.Context()
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) { wrote.Store(info.Err == nil) },
	}))
	resp, err := c.Get(sb).Do(req)
	if err != nil {
		c.Reset(sb)
		if ctx.Err() != nil {
			return 0, context.Cause(ctx)
		}
		var timeout interface{ Timeout() bool }
		if c.ResponseHeaderTimeout > 0 && errors.As(err, &timeout) && timeout.Timeout() {
			c.markUnanswered(sb)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			// The transport's own timeout (the caller's ctx is live) matches DeadlineExceeded, which
			// would read as the caller giving up: it is the sandbox not answering.
			err = errors.New(err.Error())
		}
		if wrote.Load() {
			return 0, fmt.Errorf("%w: %w: %w", runtime.ErrSandboxDown, ErrSentUnanswered, err)
		}
		return 0, fmt.Errorf("%w: %w", runtime.ErrSandboxDown, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return resp.StatusCode, ErrUnauthorized
	case resp.StatusCode >= 500:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return resp.StatusCode, fmt.Errorf("%w: %s: %s", runtime.ErrSandboxDown, resp.Status, bytes.TrimSpace(msg))
	case resp.StatusCode/100 != 2:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return resp.StatusCode, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	if out != nil && resp.StatusCode != http.StatusNoContent && !(c.AcceptedIsEmpty && resp.StatusCode == http.StatusAccepted) {
		limit := c.MaxBody
		if limit <= 0 {
			limit = MaxBodyBytes
		}
		body := &io.LimitedReader{R: resp.Body, N: limit + 1}
		err := json.NewDecoder(body).Decode(out)
		if body.N == 0 {
			// The decoder read past limit bytes: the body is too large, whatever it holds.
			return resp.StatusCode, fmt.Errorf("decoding the answer: over %d bytes: %w", limit, sandbox.ErrTooLarge)
		}
		if err != nil {
			return resp.StatusCode, fmt.Errorf("decoding the answer: %w", err)
		}
	}
	return resp.StatusCode, nil
}
