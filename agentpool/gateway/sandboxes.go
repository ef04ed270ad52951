package gateway

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/threadbox/threadbox/agentpool/internal/sandboxsock"
	"github.com/threadbox/threadbox/sandbox"
)

// ident is one sandbox generation of a thread.
type ident = sandboxsock.ID

// writeToken is the socket set's Prepare: the sandbox's token file, next to its socket, current on
// every listen (0644: the sandbox user, another uid, reads it).
func (g *Gateway) writeToken(dir string, id ident) error {
	if err := sandboxsock.WriteFileAtomic(filepath.Join(dir, tokenName), []byte(Token(g.cfg.Secret, id.Thread, id.Gen)), 0o644); err != nil {
		return fmt.Errorf("gateway: writing the sandbox token: %w", err)
	}
	return nil
}

// identify says which thread and generation a sandbox belongs to: remembered from Create, Inspect or
// Start, else read from its labels.
func (g *Gateway) identify(ctx context.Context, h sandbox.Handle) (ident, bool) {
	g.mu.Lock()
	prov := g.prov
	g.mu.Unlock()
	return g.socks.Identify(ctx, prov, h)
}

// forwardCommand is the sandbox's main process: the forwarder, from 127.0.0.1:<port> to the socket.
func (g *Gateway) forwardCommand() []string {
	cmd := append([]string{ForwarderPath}, g.cfg.ForwarderArgs...)
	return append(cmd,
		"-listen", "127.0.0.1:"+strconv.Itoa(g.cfg.Port),
		"-socket", SandboxDir+"/"+socketName,
		"-token-file", SandboxDir+"/"+tokenName)
}

// SandboxDir is the host directory of a thread's sandbox generation (its socket and token).
func (g *Gateway) SandboxDir(threadKey string, generation int64) string {
	return g.socks.Dir(ident{Thread: threadKey, Gen: generation})
}
