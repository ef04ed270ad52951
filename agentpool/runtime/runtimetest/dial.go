package runtimetest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/threadbox/threadbox/sandbox"
)

// DialSandbox is a sandbox whose every port is Addr, a test server on loopback: for a runtime's
// client-side tests that need no container. Its other methods are the nil Sandbox's (they panic).
type DialSandbox struct {
	sandbox.Sandbox
	Addr string
}

// Handle implements sandbox.Sandbox.
func (s DialSandbox) Handle() sandbox.Handle { return sandbox.Handle{Provider: "test", ID: "sb1"} }

// Dial implements sandbox.Sandbox: any port is Addr.
func (s DialSandbox) Dial(ctx context.Context, _ int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", s.Addr)
}

// LaunchSandbox is a DialSandbox whose every exec is a server's launch script: it prints Output and
// notes in Restarted whether it was asked to restart the server (the script's restart argument,
// argv[6], is "1").
type LaunchSandbox struct {
	DialSandbox
	Output    string
	Restarted *atomic.Bool
}

// Exec implements sandbox.Sandbox.
func (s LaunchSandbox) Exec(_ context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Cmd) > 6 && req.Cmd[6] == "1" {
		s.Restarted.Store(true)
	}
	if req.Stdout != nil {
		_, _ = req.Stdout.Write([]byte(s.Output))
	}
	return sandbox.ExecResult{}, nil
}

// CutSandbox is a sandbox whose connections (Dial) can all be cut at once, as a hiccup of the tunnel
// through the provider cuts them, while the sandbox and the server in it live on.
type CutSandbox struct {
	sandbox.Sandbox

	mu    sync.Mutex // protects conns and dials
	conns map[net.Conn]bool
	dials int
}

// Dial implements sandbox.Sandbox, keeping the connection for Cut.
func (s *CutSandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	c, err := s.Sandbox.Dial(ctx, port)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[net.Conn]bool{}
	}
	s.conns[c] = true
	s.dials++
	return c, nil
}

// Cut closes every connection dialled so far and returns how many there were.
func (s *CutSandbox) Cut() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.conns)
	for c := range s.conns {
		_ = c.Close()
	}
	clear(s.conns)
	return n
}

// Dials is how many connections were dialled.
func (s *CutSandbox) Dials() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials
}
