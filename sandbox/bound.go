package sandbox

import (
	"context"
	"fmt"
	"io/fs"
	"net"
)

// Sandbox is one sandbox bound to its provider. Runtimes work against it and never see providers.
type Sandbox interface {
	Handle() Handle
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	ReadFile(ctx context.Context, path string, max int64) ([]byte, error)
	ListFiles(ctx context.Context, dir string) ([]FileInfo, error)
	// ReadTree lists dir and reads its regular files in one pass (see TreeReader), or fails with
	// ErrUnsupported: then ListFiles and ReadFile do the same, at more calls.
	ReadTree(ctx context.Context, dir string, lim TreeLimits) (Tree, error)
	// Dial reaches a TCP port inside the sandbox, or fails with ErrUnsupported.
	Dial(ctx context.Context, port int) (net.Conn, error)
}

// Bind returns the Sandbox for h on p.
func Bind(p Provider, h Handle) Sandbox { return bound{p: p, h: h} }

type bound struct {
	p Provider
	h Handle
}

var _ Sandbox = bound{}

func (b bound) Handle() Handle { return b.h }

func (b bound) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	return b.p.Exec(ctx, b.h, req)
}

func (b bound) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return b.p.WriteFile(ctx, b.h, path, data, mode)
}

func (b bound) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	return b.p.ReadFile(ctx, b.h, path, max)
}

func (b bound) ListFiles(ctx context.Context, dir string) ([]FileInfo, error) {
	return b.p.ListFiles(ctx, b.h, dir)
}

// ReadTree finds the capability through wrappers (As): a wrapper such as the gateway's socket set
// adds to a sandbox's lifecycle, never to its files, so it need not pass it through.
func (b bound) ReadTree(ctx context.Context, dir string, lim TreeLimits) (Tree, error) {
	tr, ok := As[TreeReader](b.p)
	if !ok {
		return Tree{}, fmt.Errorf("read tree %s on %s: %w", dir, b.p.Name(), ErrUnsupported)
	}
	return tr.ReadTree(ctx, b.h, dir, lim)
}

func (b bound) Dial(ctx context.Context, port int) (net.Conn, error) {
	d, ok := b.p.(Dialer)
	if !ok {
		return nil, fmt.Errorf("dial port %d on %s: %w", port, b.p.Name(), ErrUnsupported)
	}
	return d.Dial(ctx, b.h, port)
}
