package egress

import "github.com/threadbox/threadbox/agentpool/internal/sandboxsock"

// ident is one sandbox generation of a thread.
type ident = sandboxsock.ID

// SandboxDir is the host directory of a thread's sandbox generation (its socket).
func (x *Proxy) SandboxDir(threadKey string, generation int64) string {
	return x.socks.Dir(ident{Thread: threadKey, Gen: generation})
}
