package local

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

func TestRefusesWithoutAcknowledgement(t *testing.T) {
	_, err := New(Options{Dir: t.TempDir()})
	require.ErrorIs(t, err, ErrNotAcknowledged)
	require.Contains(t, err.Error(), "i_understand_no_isolation")
}

// TestConformance runs the provider suite; the local provider declares it enforces no limits, users or
// network policy, so the suite skips those cases and checks the rest (lifecycle, exec, files, dial).
func TestConformance(t *testing.T) {
	var p *Provider
	sandboxtest.Run(t, sandboxtest.Config{
		New: func(t *testing.T) sandbox.Provider {
			var err error
			p, err = New(Options{Dir: t.TempDir(), IUnderstandNoIsolation: true})
			require.NoError(t, err)
			return p
		},
		Image: "host",
		Skip: map[string]string{
			"Dial": "the suite's echo server is busybox nc inside an image; the host may have no nc. TestDialLoopback covers Dial.",
		},
		RemoveOutOfBand: func(t *testing.T, h sandbox.Handle) {
			require.NoError(t, os.RemoveAll(filepath.Dir(p.Root(h))))
		},
		StopOutOfBand: func(t *testing.T, h sandbox.Handle) {
			require.NoError(t, p.setState(h.ID, sandbox.StateStopped))
		},
	})
}

func TestPathsStayInsideTheSandbox(t *testing.T) {
	p, err := New(Options{Dir: t.TempDir(), IUnderstandNoIsolation: true})
	require.NoError(t, err)
	h, err := p.Create(t.Context(), sandbox.Spec{Image: "host", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
	require.NoError(t, err)
	outside := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(outside, []byte("s"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(p.Root(h), "workspace", "link")))
	_, err = p.ReadFile(t.Context(), h, "link", 0)
	require.Error(t, err, "a symlink is never followed")
	_, err = p.ReadFile(t.Context(), h, "../../../../../../"+outside, 0)
	require.Error(t, err)
	require.True(t, errors.Is(err, os.ErrNotExist) || err != nil)
	require.NoError(t, p.WriteFile(t.Context(), h, "/../../escape.txt", []byte("x"), 0))
	_, statErr := os.Stat(filepath.Join(p.Root(h), "escape.txt"))
	require.NoError(t, statErr, "'..' above the root stays at the root")
}

func TestDialLoopback(t *testing.T) {
	p, err := New(Options{Dir: t.TempDir(), IUnderstandNoIsolation: true})
	require.NoError(t, err)
	h, err := p.Create(t.Context(), sandbox.Spec{Image: "host", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(c, c)
			c.Close()
		}
	}()
	c, err := p.Dial(t.Context(), h, ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))

	require.NoError(t, p.Stop(t.Context(), h))
	_, err = p.Dial(t.Context(), h, 1)
	require.ErrorIs(t, err, sandbox.ErrNotRunning)
}

// ListFiles lists directories only: a file or a fifo is refused as on Docker
// (ErrNotRegular), never answered with an empty listing that reads as "nothing there".
func TestListFilesNotADirectory(t *testing.T) {
	p, err := New(Options{Dir: t.TempDir(), IUnderstandNoIsolation: true})
	require.NoError(t, err)
	h, err := p.Create(t.Context(), sandbox.Spec{Image: "host", Labels: sandbox.Labels{Deployment: "d", Thread: "t"}})
	require.NoError(t, err)
	require.NoError(t, p.WriteFile(t.Context(), h, "out/file", []byte("x"), 0))
	require.NoError(t, syscall.Mkfifo(filepath.Join(p.Root(h), "workspace", "out", "fifo"), 0o600))
	for _, dir := range []string{"out/file", "out/fifo"} {
		t.Run(dir, func(t *testing.T) {
			_, err := p.ListFiles(t.Context(), h, dir)
			require.ErrorIs(t, err, sandbox.ErrNotRegular)
		})
	}
	list, err := p.ListFiles(t.Context(), h, "out")
	require.NoError(t, err)
	require.Len(t, list, 2)
}
