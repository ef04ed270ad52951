package egress

import (
	"bytes"
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

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// dir is the host directory of one sandbox generation, named by a hash so that thread keys need no
// escaping and the socket path stays short. The "e" keeps it apart from the gateway's directories
// when both share a parent.
func (x *Proxy) dir(id ident) string {
	sum := sha256.Sum256([]byte(id.thread + "\x00" + strconv.FormatInt(id.gen, 10)))
	return filepath.Join(x.cfg.SocketDir, "e"+hex.EncodeToString(sum[:8]))
}

// SandboxDir is the host directory of a thread's sandbox generation (its socket).
func (x *Proxy) SandboxDir(threadKey string, generation int64) string {
	return x.dir(ident{thread: threadKey, gen: generation})
}

// listen makes sure the sandbox's socket is served (again, after a bot restart) and returns its
// directory. An older generation's socket of the thread is closed.
func (x *Proxy) listen(id ident) (string, error) {
	dir := x.dir(id)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return "", errors.New("egress: closed")
	}
	if _, ok := x.listeners[id]; ok {
		return dir, nil
	}
	if x.cfg.SocketDir == "" || !filepath.IsAbs(x.cfg.SocketDir) {
		return "", fmt.Errorf("egress: socket directory %q must be an absolute path", x.cfg.SocketDir)
	}
	// 0755: the sandbox user (another uid) dials the socket; no other sandbox mounts this directory.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	sock := filepath.Join(dir, socketName)
	_ = os.Remove(sock) // left by a previous process
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	if err := os.Chmod(sock, 0o666); err != nil { // connecting needs write permission
		_ = ln.Close()
		return "", fmt.Errorf("egress: %w", err)
	}
	x.listeners[id] = ln
	x.bySocket[sock] = id
	for old := range x.listeners {
		if old.thread == id.thread && old.gen < id.gen {
			x.closeLocked(old)
		}
	}
	go func() {
		if err := x.srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			x.log.Warn("egress socket stopped", zap.String("thread", id.thread), zap.Error(err))
		}
	}()
	return dir, nil
}

// closeLocked stops serving a sandbox generation and removes its directory. x.mu is held.
func (x *Proxy) closeLocked(id ident) {
	if ln, ok := x.listeners[id]; ok {
		_ = ln.Close()
		delete(x.listeners, id)
	}
	dir := x.dir(id)
	delete(x.bySocket, filepath.Join(dir, socketName))
	if err := os.RemoveAll(dir); err != nil {
		x.log.Warn("removing a sandbox's egress directory", zap.String("dir", dir), zap.Error(err))
	}
}

func (x *Proxy) forget(id ident) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closeLocked(id)
	for sid, v := range x.sandboxes {
		if v == id {
			delete(x.sandboxes, sid)
		}
	}
}

func (x *Proxy) remember(sandboxID string, id ident) {
	x.mu.Lock()
	x.sandboxes[sandboxID] = id
	x.mu.Unlock()
}

func (x *Proxy) identLabels(sandboxID string, labels map[string]string) (ident, bool) {
	l := sandbox.ParseLabels(labels)
	if l.Thread == "" || l.Generation < 1 {
		return ident{}, false
	}
	id := ident{thread: l.Thread, gen: l.Generation}
	x.remember(sandboxID, id)
	return id, true
}

// identify says which thread and generation a sandbox belongs to: remembered, else from its labels.
func (x *Proxy) identify(ctx context.Context, p sandbox.Provider, h sandbox.Handle) (ident, bool) {
	x.mu.Lock()
	id, ok := x.sandboxes[h.ID]
	x.mu.Unlock()
	if ok {
		return id, true
	}
	info, err := p.Inspect(ctx, h)
	if err != nil {
		return ident{}, false
	}
	return x.identLabels(h.ID, info.Labels)
}

// installForwarder copies the forwarder binary into the socket directory and returns the copy's
// path, so sandboxes mount a file that outlives the bot's own binary (as the gateway does).
func installForwarder(socketDir, src string) (string, error) {
	if socketDir == "" || !filepath.IsAbs(socketDir) {
		return "", fmt.Errorf("egress: socket directory %q must be an absolute path", socketDir)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("egress: reading the forwarder: %w", err)
	}
	if err := os.MkdirAll(socketDir, 0o755); err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	dst := filepath.Join(socketDir, "threadbox-forward")
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, data) {
		return dst, nil
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return "", fmt.Errorf("egress: installing the forwarder: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("egress: installing the forwarder: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("egress: installing the forwarder: %w", err)
	}
	return dst, nil
}
