package runtimetest

import (
	"context"
	"net"
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
