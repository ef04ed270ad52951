package forward_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/gateway/forward"
)

// TestRelay: bytes go both ways between a loopback client and the unix socket, untouched, and a
// missing socket is answered with a 502 that says why.
func TestRelay(t *testing.T) {
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
			go func() { // echo
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- forward.Relay(ctx, ln, sock) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	_, err = io.WriteString(c, "CONNECT x:443 HTTP/1.1\r\n\r\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "CONNECT x:443 HTTP/1.1\r\n", line)
	_ = c.Close()

	require.NoError(t, us.Close())
	c, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Contains(t, string(b), "502 Bad Gateway")
	require.Contains(t, string(b), "the egress proxy is not reachable")
	_ = c.Close()

	cancel()
	require.NoError(t, <-done)
}

func TestRunOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    forward.Options
		want string
	}{
		{"nothing", forward.Options{}, "nothing to forward"},
		{"gateway without token file", forward.Options{Listen: "127.0.0.1:0", Socket: "/x"}, "-token-file are required"},
		{"egress half", forward.Options{EgressListen: "127.0.0.1:0"}, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, forward.Run(t.Context(), tc.o), tc.want)
		})
	}
}
