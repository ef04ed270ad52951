package forward

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRelayCancelledBetweenDialAndRegistration: a connection whose upstream dial succeeded just as
// Relay was cancelled is closed too, so Relay returns instead of waiting on a quiet pair for ever.
func TestRelayCancelledBetweenDialAndRegistration(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "tbfw")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "egress.sock")
	us, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = us.Close() })
	go func() {
		for {
			c, err := us.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() }) // a quiet upstream: it never closes by itself
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	dialed, cont := make(chan struct{}), make(chan struct{})
	var once sync.Once
	afterDial = func() {
		first := false
		once.Do(func() { first = true; close(dialed) })
		if first {
			<-cont // only the test's connection waits; probes go on
		}
	}
	t.Cleanup(func() { afterDial = func() {} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- Relay(ctx, ln, sock) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() }) // a quiet client too
	<-dialed
	cancel()
	// Relay's stop has begun once the listener refuses: wait for that by dialing until refused.
	for {
		probe, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		_ = probe.Close()
	}
	close(cont)
	require.NoError(t, <-done)
}
