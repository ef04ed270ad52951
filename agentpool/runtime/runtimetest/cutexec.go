package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/threadbox/threadbox/sandbox"
)

// CutExec is a sandbox whose prompt exec (the one with stdin) loses its stream once Cut is called,
// as when the Docker daemon restarts with live-restore or the connection to a cloud provider drops:
// the caller gets an error, and the process in the sandbox runs on, its output no longer passed on.
// The real exec goes on until its process ends, then closes Done. One prompt exec per CutExec.
type CutExec struct {
	sandbox.Sandbox
	cut  chan struct{}
	once sync.Once
	// Done is closed when the real exec has ended.
	Done chan struct{}
}

// NewCutExec wraps sb.
func NewCutExec(sb sandbox.Sandbox) *CutExec {
	return &CutExec{Sandbox: sb, cut: make(chan struct{}), Done: make(chan struct{})}
}

// Cut cuts the prompt exec's stream; calls after the first do nothing.
func (s *CutExec) Cut() { s.once.Do(func() { close(s.cut) }) }

// ErrEndedUncut is the prompt exec ending before the test cut it.
var ErrEndedUncut = errors.New("the exec ended before the test cut it")

// Exec implements sandbox.Sandbox.
func (s *CutExec) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if req.Stdin == nil {
		return s.Sandbox.Exec(ctx, req)
	}
	req.Stdout = &gatedWriter{w: req.Stdout, cut: s.cut}
	go func() {
		defer close(s.Done)
		_, _ = s.Sandbox.Exec(context.WithoutCancel(ctx), req)
	}()
	select {
	case <-s.cut:
		return sandbox.ExecResult{}, fmt.Errorf("exec in sandbox: reading output: %w", io.ErrUnexpectedEOF)
	case <-s.Done:
		return sandbox.ExecResult{}, ErrEndedUncut
	}
}

// gatedWriter passes output on until cut.
type gatedWriter struct {
	mu  sync.Mutex
	w   io.Writer
	cut chan struct{}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.cut:
		return len(p), nil
	default:
		return g.w.Write(p)
	}
}
