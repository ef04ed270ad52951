package runtimetest

import (
	"context"
	"net"

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
