package gateway

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

// dir is the host directory of one sandbox generation: named by a hash, so that thread keys need no
// escaping and the socket path stays short.
func (g *Gateway) dir(id ident) string {
	sum := sha256.Sum256([]byte(id.thread + "\x00" + strconv.FormatInt(id.gen, 10)))
	return filepath.Join(g.cfg.SocketDir, hex.EncodeToString(sum[:8]))
}

// listen makes sure the sandbox's socket is served (again, after a bot restart) and its token file is
// current, and returns its directory. An older generation's socket of the thread is closed: its
// token is revoked anyway, and nothing should be left to dial.
func (g *Gateway) listen(id ident) (string, error) {
	dir := g.dir(id)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return "", errors.New("gateway: closed")
	}
	if _, ok := g.listeners[id]; ok {
		return dir, nil
	}
	if g.cfg.SocketDir == "" || !filepath.IsAbs(g.cfg.SocketDir) {
		return "", fmt.Errorf("gateway: socket directory %q must be an absolute path", g.cfg.SocketDir)
	}
	// 0755 and 0644: the sandbox user (another uid) reads the token and dials the socket; no other
	// sandbox mounts this directory.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("gateway: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, tokenName), []byte(Token(g.cfg.Secret, id.thread, id.gen)), 0o644); err != nil {
		return "", fmt.Errorf("gateway: writing the sandbox token: %w", err)
	}
	sock := filepath.Join(dir, socketName)
	_ = os.Remove(sock) // left by a previous process
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return "", fmt.Errorf("gateway: %w", err)
	}
	// Connecting to a unix socket needs write permission on it.
	if err := os.Chmod(sock, 0o666); err != nil {
		_ = ln.Close()
		return "", fmt.Errorf("gateway: %w", err)
	}
	g.listeners[id] = ln
	g.bySocket[sock] = id
	for old := range g.listeners {
		if old.thread == id.thread && old.gen < id.gen {
			g.closeLocked(old)
		}
	}
	go func() {
		if err := g.srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			g.log.Warn("gateway socket stopped", zap.String("thread", id.thread), zap.Error(err))
		}
	}()
	return dir, nil
}

// closeLocked stops serving a sandbox generation and removes its directory. g.mu is held.
func (g *Gateway) closeLocked(id ident) {
	if ln, ok := g.listeners[id]; ok {
		_ = ln.Close()
		delete(g.listeners, id)
	}
	dir := g.dir(id)
	delete(g.bySocket, filepath.Join(dir, socketName))
	if err := os.RemoveAll(dir); err != nil {
		g.log.Warn("removing a sandbox's gateway directory", zap.String("dir", dir), zap.Error(err))
	}
}

func (g *Gateway) forget(id ident) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closeLocked(id)
	for sid, v := range g.sandboxes {
		if v == id {
			delete(g.sandboxes, sid)
		}
	}
}

func (g *Gateway) remember(sandboxID string, id ident) {
	g.mu.Lock()
	g.sandboxes[sandboxID] = id
	g.mu.Unlock()
}

// identify says which thread and generation a sandbox belongs to: remembered from Create, Inspect or
// Start, else read from its labels.
func (g *Gateway) identify(ctx context.Context, h sandbox.Handle) (ident, bool) {
	g.mu.Lock()
	id, ok := g.sandboxes[h.ID]
	prov := g.prov
	g.mu.Unlock()
	if ok || prov == nil {
		return id, ok
	}
	info, err := prov.Inspect(ctx, h)
	if err != nil {
		return ident{}, false
	}
	return g.identLabels(h.ID, info.Labels)
}

func (g *Gateway) identLabels(sandboxID string, labels map[string]string) (ident, bool) {
	l := sandbox.ParseLabels(labels)
	if l.Thread == "" || l.Generation < 1 {
		return ident{}, false
	}
	id := ident{thread: l.Thread, gen: l.Generation}
	g.remember(sandboxID, id)
	return id, true
}

// forwardCommand is the sandbox's main process: the forwarder, from 127.0.0.1:<port> to the socket.
func (g *Gateway) forwardCommand() []string {
	cmd := append([]string{ForwarderPath}, g.cfg.ForwarderArgs...)
	return append(cmd,
		"-listen", "127.0.0.1:"+strconv.Itoa(g.cfg.Port),
		"-socket", SandboxDir+"/"+socketName,
		"-token-file", SandboxDir+"/"+tokenName)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile's mode is cut by the umask
		return err
	}
	return os.Rename(tmp, path)
}

// SandboxDir is the host directory of a thread's sandbox generation (its socket and token).
func (g *Gateway) SandboxDir(threadKey string, generation int64) string {
	return g.dir(ident{thread: threadKey, gen: generation})
}

// installForwarder copies the forwarder binary into the socket directory and returns the copy's path.
// Sandboxes mount the copy: it stays where it is when the bot's own binary is replaced or was a
// temporary one (go run), and a stopped sandbox can start again after the bot is gone.
func installForwarder(socketDir, src string) (string, error) {
	if socketDir == "" || !filepath.IsAbs(socketDir) {
		return "", fmt.Errorf("gateway: socket directory %q must be an absolute path", socketDir)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("gateway: reading the forwarder: %w", err)
	}
	if err := os.MkdirAll(socketDir, 0o755); err != nil {
		return "", fmt.Errorf("gateway: %w", err)
	}
	dst := filepath.Join(socketDir, "threadbox-forward")
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, data) {
		return dst, nil
	}
	if err := writeFileAtomic(dst, data, 0o755); err != nil {
		return "", fmt.Errorf("gateway: installing the forwarder: %w", err)
	}
	return dst, nil
}
