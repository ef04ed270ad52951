package sandboxsock_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/internal/sandboxsock"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

func newSet(t *testing.T) (*sandboxsock.Set, chan sandboxsock.ID) {
	t.Helper()
	// A short root: unix socket paths are limited to about 100 bytes.
	root, err := os.MkdirTemp("", "sock")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	set, seen, _ := newSetAt(t, root)
	return set, seen
}

// newSetAt is a Set on root with its own server (a replica's), which it also returns.
func newSetAt(t *testing.T, root string) (*sandboxsock.Set, chan sandboxsock.ID, *http.Server) {
	t.Helper()
	seen := make(chan sandboxsock.ID, 10)
	var set *sandboxsock.Set
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := r.Context().Value(ownerKey{}).(sandboxsock.ID)
			seen <- id
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if id, ok := set.Owner(c.LocalAddr().String()); ok {
				ctx = context.WithValue(ctx, ownerKey{}, id)
			}
			return ctx
		},
	}
	t.Cleanup(func() { _ = srv.Close() })
	set = sandboxsock.New(sandboxsock.Options{Root: root, Socket: "s.sock", Name: "test", Server: srv,
		Prepare: func(dir string, id sandboxsock.ID) error {
			return sandboxsock.WriteFileAtomic(filepath.Join(dir, "token"), []byte(id.Thread), 0o644)
		}})
	return set, seen, srv
}

type ownerKey struct{}

func get(t *testing.T, sock string) {
	t.Helper()
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://sandbox/")
	require.NoError(t, err)
	_ = resp.Body.Close()
}

// TestSetKnowsWhichSandboxCalls: each generation has its own socket; a request is attributed to the
// sandbox whose socket it came in on; a newer generation closes the older one's socket and directory.
func TestSetKnowsWhichSandboxCalls(t *testing.T) {
	set, seen := newSet(t)
	a1 := sandboxsock.ID{Thread: "a", Gen: 1}
	b1 := sandboxsock.ID{Thread: "b", Gen: 1}
	dirA, err := set.Listen(a1)
	require.NoError(t, err)
	dirB, err := set.Listen(b1)
	require.NoError(t, err)
	require.NotEqual(t, dirA, dirB)
	tok, err := os.ReadFile(filepath.Join(dirA, "token"))
	require.NoError(t, err)
	require.Equal(t, "a", string(tok), "Prepare ran")

	get(t, filepath.Join(dirA, "s.sock"))
	require.Equal(t, a1, <-seen)
	get(t, filepath.Join(dirB, "s.sock"))
	require.Equal(t, b1, <-seen)

	a2 := sandboxsock.ID{Thread: "a", Gen: 2}
	_, err = set.Listen(a2)
	require.NoError(t, err)
	require.NoDirExists(t, dirA, "the older generation's directory is gone")
	set.Forget(b1)
	require.NoDirExists(t, dirB)

	set.Close()
	_, err = set.Listen(sandboxsock.ID{Thread: "c", Gen: 1})
	require.ErrorContains(t, err, "test: closed")
}

type reaping struct{ sandbox.Provider }

func (reaping) ListVolumes(context.Context, map[string]string) ([]sandbox.Volume, error) {
	return nil, nil
}
func (reaping) RemoveVolume(context.Context, string) error { return nil }

// TestWrapKeepsCapabilities: the provider's optional capabilities (volume reaping, ping, attach)
// stay reachable through the wrapper, so the reaper still removes orphan volumes when the gateway or
// egress wraps the provider.
func TestWrapKeepsCapabilities(t *testing.T) {
	set, _ := newSet(t)
	inner := reaping{sandboxfake.New()}
	fit := func(spec sandbox.Spec, _ string) (sandbox.Spec, error) { return spec, nil }
	wrapped := set.Wrap(set.Wrap(inner, fit), fit)
	_, ok := wrapped.(sandbox.VolumeReaper)
	require.False(t, ok, "the wrapper itself does not claim it")
	vr, ok := sandbox.As[sandbox.VolumeReaper](wrapped)
	require.True(t, ok, "found through Unwrap")
	require.Equal(t, inner, vr)
}

// TestSocketTakenOverByAnotherReplica: two replicas share the socket root (a host directory the
// sandboxes mount). The second to run a thread's turn takes the socket over; once it is gone, the
// first, running the thread again, serves the socket anew instead of trusting a listener whose file
// was replaced. And closing a listener whose file was taken over never removes the other's socket.
func TestSocketTakenOverByAnotherReplica(t *testing.T) {
	root, err := os.MkdirTemp("", "sock")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	a, seenA, srvA := newSetAt(t, root)
	b, seenB, srvB := newSetAt(t, root)
	id := sandboxsock.ID{Thread: "t", Gen: 1}

	dir, err := a.Listen(id)
	require.NoError(t, err)
	sock := filepath.Join(dir, "s.sock")
	_, err = b.Listen(id)
	require.NoError(t, err)
	get(t, sock)
	require.Equal(t, id, <-seenB, "B took the socket over")

	require.NoError(t, srvB.Close()) // B exits
	_, err = a.Listen(id)
	require.NoError(t, err)
	get(t, sock)
	require.Equal(t, id, <-seenA, "A serves the socket again")

	// B comes back and takes it over again; then A exits, closing its listener, whose file is B's
	// now: B's socket must survive it.
	b2, seenB2, _ := newSetAt(t, root)
	_, err = b2.Listen(id)
	require.NoError(t, err)
	require.NoError(t, srvA.Close())
	get(t, sock)
	require.Equal(t, id, <-seenB2)
}
