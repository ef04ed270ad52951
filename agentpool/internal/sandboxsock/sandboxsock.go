// Package sandboxsock serves one unix socket per sandbox generation, each in a host directory of its
// own that only that sandbox mounts. It is how the bot's model gateway and egress proxy reach Docker
// sandboxes that have no network: the forwarder inside the sandbox relays a loopback port to the
// socket, and the server knows which sandbox a connection came from by the socket it came in on, so a
// sandbox cannot speak for another.
package sandboxsock

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// ID is one sandbox generation of a thread.
type ID struct {
	Thread string
	Gen    int64
}

// Options configure a Set.
type Options struct {
	// Root is the absolute host directory the sandbox directories are made in.
	Root string
	// Prefix starts each directory's name, to keep two Sets sharing Root apart.
	Prefix string
	// Socket is the socket's file name in a sandbox directory.
	Socket string
	// Name names the user ("gateway", "egress") in errors and logs.
	Name string
	// Server serves every socket; its ConnContext may call Set.Owner.
	Server *http.Server
	Log    *zap.Logger
	// Prepare, when set, runs before a sandbox directory's socket is listened on (to write a token
	// file next to it, say), each time Listen starts serving it.
	Prepare func(dir string, id ID) error
	// MaxConns bounds the connections one sandbox's socket holds open (default DefaultMaxConns).
	MaxConns int
}

// Set is the sockets of one server. It is safe for concurrent use.
type Set struct {
	o Options

	mu sync.Mutex // protects the following
	// listeners are the sockets served, by identity; bySocket maps a socket path back.
	listeners map[ID]net.Listener
	// inodes are the socket files' inodes as listened on: a different one at the path means
	// another replica sharing Root took the socket over.
	inodes   map[ID]uint64
	bySocket map[string]ID
	// sandboxes remembers which thread and generation a sandbox ID belongs to.
	sandboxes map[string]ID
	closed    bool
}

func New(o Options) *Set {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return &Set{o: o, listeners: map[ID]net.Listener{}, inodes: map[ID]uint64{}, bySocket: map[string]ID{}, sandboxes: map[string]ID{}}
}

// Dir is the host directory of one sandbox generation: named by a hash, so that thread keys need no
// escaping and the socket path stays short.
func (s *Set) Dir(id ID) string {
	sum := sha256.Sum256([]byte(id.Thread + "\x00" + strconv.FormatInt(id.Gen, 10)))
	return filepath.Join(s.o.Root, s.o.Prefix+hex.EncodeToString(sum[:8]))
}

// Listen makes sure the sandbox's socket is served (again, after a bot restart) and returns its
// directory. An older generation's socket of the thread is closed and its directory removed: nothing
// should be left to dial.
func (s *Set) Listen(id ID) (string, error) {
	dir := s.Dir(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", fmt.Errorf("%s: closed", s.o.Name)
	}
	sock := filepath.Join(dir, s.o.Socket)
	if _, ok := s.listeners[id]; ok {
		if s.ownsLocked(id, sock) {
			return dir, nil
		}
		// Another replica sharing the root took the socket over (its turn of the thread ran there)
		// and may be gone since: serve it again rather than trust a listener nobody can reach.
		_ = s.listeners[id].Close()
		delete(s.listeners, id)
		delete(s.inodes, id)
		delete(s.bySocket, sock)
	}
	if s.o.Root == "" || !filepath.IsAbs(s.o.Root) {
		return "", fmt.Errorf("%s: socket directory %q must be an absolute path", s.o.Name, s.o.Root)
	}
	// 0755: the sandbox user (another uid) reads what Prepare writes and dials the socket; no other
	// sandbox mounts this directory.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", s.o.Name, err)
	}
	if s.o.Prepare != nil {
		if err := s.o.Prepare(dir, id); err != nil {
			return "", err
		}
	}
	_ = os.Remove(sock) // left by a previous process, or another replica's
	uln, err := net.Listen("unix", sock)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.o.Name, err)
	}
	// Closing must not remove the file: by then it may be another replica's socket (taken over).
	if ul, ok := uln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	ino, err := inode(sock)
	if err != nil {
		_ = uln.Close()
		return "", fmt.Errorf("%s: %w", s.o.Name, err)
	}
	ln := newLimitListener(uln, cmp.Or(s.o.MaxConns, DefaultMaxConns))
	// Connecting to a unix socket needs write permission on it.
	if err := os.Chmod(sock, 0o666); err != nil {
		_ = ln.Close()
		return "", fmt.Errorf("%s: %w", s.o.Name, err)
	}
	s.listeners[id] = ln
	s.inodes[id] = ino
	s.bySocket[sock] = id
	for old := range s.listeners {
		if old.Thread == id.Thread && old.Gen < id.Gen {
			s.closeLocked(old)
		}
	}
	go func() {
		if err := s.o.Server.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			s.o.Log.Warn(s.o.Name+" socket stopped", zap.String("thread", id.Thread), zap.Error(err))
		}
	}()
	return dir, nil
}

// ownsLocked reports whether the socket file at sock is still the one id's listener made. s.mu is
// held.
func (s *Set) ownsLocked(id ID, sock string) bool {
	ino, err := inode(sock)
	return err == nil && ino == s.inodes[id]
}

// inode is the file's inode number.
func inode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no inode", path)
	}
	return st.Ino, nil
}

// closeLocked stops serving a sandbox generation and removes its directory. s.mu is held.
func (s *Set) closeLocked(id ID) {
	if ln, ok := s.listeners[id]; ok {
		_ = ln.Close()
		delete(s.listeners, id)
		delete(s.inodes, id)
	}
	dir := s.Dir(id)
	delete(s.bySocket, filepath.Join(dir, s.o.Socket))
	if err := os.RemoveAll(dir); err != nil {
		s.o.Log.Warn("removing a sandbox's "+s.o.Name+" directory", zap.String("dir", dir), zap.Error(err))
	}
}

// Forget stops serving a sandbox generation (destroyed, or never made), removes its directory, and
// forgets the sandbox IDs that were it.
func (s *Set) Forget(id ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(id)
	for sid, v := range s.sandboxes {
		if v == id {
			delete(s.sandboxes, sid)
		}
	}
}

// Remember records which thread and generation a sandbox is.
func (s *Set) Remember(sandboxID string, id ID) {
	s.mu.Lock()
	s.sandboxes[sandboxID] = id
	s.mu.Unlock()
}

// FromLabels reads a sandbox's thread and generation from its labels, and remembers them.
func (s *Set) FromLabels(sandboxID string, labels map[string]string) (ID, bool) {
	l := sandbox.ParseLabels(labels)
	if l.Thread == "" || l.Generation < 1 {
		return ID{}, false
	}
	id := ID{Thread: l.Thread, Gen: l.Generation}
	s.Remember(sandboxID, id)
	return id, true
}

// Identify says which thread and generation a sandbox is: remembered, else read from its labels
// through prov (none: remembered only).
func (s *Set) Identify(ctx context.Context, prov sandbox.Provider, h sandbox.Handle) (ID, bool) {
	s.mu.Lock()
	id, ok := s.sandboxes[h.ID]
	s.mu.Unlock()
	if ok || prov == nil {
		return id, ok
	}
	info, err := prov.Inspect(ctx, h)
	if err != nil {
		return ID{}, false
	}
	return s.FromLabels(h.ID, info.Labels)
}

// Owner is the sandbox whose socket a connection came in on (its local address), for ConnContext.
func (s *Set) Owner(localAddr string) (ID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.bySocket[localAddr]
	return id, ok
}

// Close refuses further Listens. The server's own Close stops the listeners; the directories stay,
// since the sandboxes still mount them and the next process listens there again.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// WriteFileAtomic writes data to path through a temporary file and a rename, with exactly mode.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile's mode is cut by the umask
		return err
	}
	return os.Rename(tmp, path)
}

// InstallForwarder copies the forwarder binary src into root and returns the copy's path. Sandboxes
// mount the copy: it stays where it is when the bot's own binary is replaced or was a temporary one
// (go run), and a stopped sandbox can start again after the bot is gone. name is the user, for errors.
func InstallForwarder(name, root, src string) (string, error) {
	if root == "" || !filepath.IsAbs(root) {
		return "", fmt.Errorf("%s: socket directory %q must be an absolute path", name, root)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("%s: reading the forwarder: %w", name, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	dst := filepath.Join(root, "threadbox-forward")
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, data) {
		return dst, nil
	}
	if err := WriteFileAtomic(dst, data, 0o755); err != nil {
		return "", fmt.Errorf("%s: installing the forwarder: %w", name, err)
	}
	return dst, nil
}
