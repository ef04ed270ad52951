package sandboxsock_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/internal/sandboxsock"
)

// TestSocketHoldsAtMostMaxConns: a sandbox that opens connections and sends nothing holds at most
// MaxConns of them in the bot; the next is taken only once one of those closes.
func TestSocketHoldsAtMostMaxConns(t *testing.T) {
	accepted := make(chan net.Conn, 10)
	srv := &http.Server{
		Handler: http.NotFoundHandler(),
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				accepted <- c
			}
		},
	}
	root, err := os.MkdirTemp("", "sock")
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(); _ = os.RemoveAll(root) })
	set := sandboxsock.New(sandboxsock.Options{Root: root, Socket: "s.sock", Name: "test", Server: srv, MaxConns: 2})
	t.Cleanup(set.Close)
	dir, err := set.Listen(sandboxsock.ID{Thread: "web:c1", Gen: 1})
	require.NoError(t, err)
	sock := filepath.Join(dir, "s.sock")

	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("unix", sock) // the third waits in the kernel's backlog
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	first := <-accepted
	<-accepted
	require.Equal(t, 2, sandboxsock.OpenConns(set, sandboxsock.ID{Thread: "web:c1", Gen: 1}), "the bound is reached")
	select {
	case <-accepted:
		t.Fatal("a third connection was taken while two were open")
	default:
	}
	require.NoError(t, first.Close()) // the server lets one go
	<-accepted                        // and only then takes the waiting one
	_ = clients
}
