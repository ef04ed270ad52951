package agentpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

func TestErrorCode(t *testing.T) {
	daemon := errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"nil has no code", nil, ""},
		{"unclassified is internal", daemon, EINTERNAL},
		{"classified keeps its code through wrapping", fmt.Errorf("turn: %w", &Error{Code: ERUNTIME, Op: "prompt", Err: daemon}), ERUNTIME},
		{"provider outage", fmt.Errorf("docker inspect d710: %w: %w", sandbox.ErrUnavailable, daemon), EUNAVAILABLE},
		{"provider at its limit of running sandboxes", fmt.Errorf("create sandbox: %w", sandbox.ErrProviderBusy), EPROVIDERBUSY},
		{"sqlite held by another process", fmt.Errorf("db: %w", db.ErrLocked), EUNAVAILABLE},
		{"lost thread lock", ErrLockLost, EUNAVAILABLE},
		{"interrupted by a restart", ErrInterrupted, EINTERRUPTED},
		{"watchdog", fmt.Errorf("%w for 10m0s; aborted", ErrStuck), ESTUCK},
		{"reset", ErrReset, ERESET},
		{"shutting down", ErrClosed, ESHUTDOWN},
		{"stop command", ErrCancelled, ECANCELLED},
		{"queue full", fmt.Errorf("agentpool: submit: %w (50)", ErrQueueFull), ECAPACITY},
		{"over a read cap", fmt.Errorf("read: %w", sandbox.ErrFileTooLarge), ETOOLARGE},
		{"deadline", fmt.Errorf("db: %w", context.DeadlineExceeded), ETIMEOUT},
		{"cancelled context", context.Canceled, ECANCELLED},
		{"no such row", fmt.Errorf("db: session x: %w", db.ErrNotFound), ENOTFOUND},
		{"compare-and-set lost", &db.TransitionError{Entity: "session", Key: "k", To: "active", Actual: "destroying"}, ECONFLICT},
		{"bad argument", fmt.Errorf("db: %w: empty key", db.ErrInvalid), EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ErrorCode(tt.err))
		})
	}
}

func TestClassifyPrefersWhatTheCauseSays(t *testing.T) {
	daemon := errors.New("daemon said no")
	tests := []struct {
		name string
		err  error
		want Code
	}{
		{"unknown cause takes the place's code", daemon, ESANDBOX},
		{"an outage beats the place", fmt.Errorf("inspect: %w", sandbox.ErrUnavailable), EUNAVAILABLE},
		{"an earlier classification beats the place", &Error{Code: ETOOLARGE, Op: "read", Err: daemon}, ETOOLARGE},
		// Which deadline ran out depends on the place: the caller names it (ETIMEOUT only for the
		// turn's own limit), so a context error alone does not decide.
		{"a deadline does not decide", fmt.Errorf("create: %w", context.DeadlineExceeded), ESANDBOX},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(ESANDBOX, "prepare sandbox", tt.err)
			require.Equal(t, tt.want, ErrorCode(err))
			require.ErrorIs(t, err, tt.err, "the cause stays matchable")
			require.Equal(t, "prepare sandbox: "+tt.err.Error(), err.Error(), "the operator's text keeps the cause")
		})
	}
	require.NoError(t, classify(ESANDBOX, "x", nil))
}

// TestTurnFailuresAreClassified runs real turns that fail at each stage and checks the outcome's
// code: the pool, which knows where it failed, decides it.
func TestTurnFailuresAreClassified(t *testing.T) {
	boom := errors.New("exit status 125: Error response from daemon: container d710c0ffee")
	tests := []struct {
		name  string
		setup func(p *sandboxfake.Provider, rt *scriptRuntime)
		files []InboundFile
		want  Code
	}{
		{name: "create fails", setup: func(p *sandboxfake.Provider, _ *scriptRuntime) { p.FailNext("Create", boom) }, want: ESANDBOX},
		{name: "provider down", setup: func(p *sandboxfake.Provider, _ *scriptRuntime) {
			// Down for longer than the turn waits (ProviderWait, set short below): every attempt fails.
			for range 50 {
				p.FailNext("Create", fmt.Errorf("docker create: %w: %w: %w", sandbox.ErrUnavailable, sandbox.ErrNoEffect, boom))
			}
		}, want: EUNAVAILABLE},
		{name: "runtime will not start", setup: func(_ *sandboxfake.Provider, rt *scriptRuntime) {
			rt.ensureErrs = []error{boom, boom}
		}, want: ERUNTIME},
		{name: "prompt fails", setup: func(_ *sandboxfake.Provider, rt *scriptRuntime) {
			rt.promptFunc = func(context.Context, sandbox.Sandbox, string, runtime.Prompt, func(runtime.Event)) (runtime.Result, error) {
				return runtime.Result{}, boom
			}
		}, want: ERUNTIME},
		{name: "sandbox stays down", setup: func(_ *sandboxfake.Provider, rt *scriptRuntime) {
			rt.promptFunc = func(context.Context, sandbox.Sandbox, string, runtime.Prompt, func(runtime.Event)) (runtime.Result, error) {
				return runtime.Result{}, fmt.Errorf("dial: %w", runtime.ErrSandboxDown)
			}
		}, want: ESANDBOX},
		{name: "agent session lost twice", setup: func(_ *sandboxfake.Provider, rt *scriptRuntime) {
			rt.promptFunc = func(context.Context, sandbox.Sandbox, string, runtime.Prompt, func(runtime.Event)) (runtime.Result, error) {
				return runtime.Result{}, fmt.Errorf("session s1: %w", runtime.ErrSessionMissing)
			}
		}, want: ERUNTIME},
		{name: "attachment cannot be fetched", files: []InboundFile{{Name: "a.txt", Open: func(context.Context) (io.ReadCloser, error) {
			return nil, boom
		}}}, want: EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prov, rt := sandboxfake.New(), &scriptRuntime{}
			if tt.setup != nil {
				tt.setup(prov, rt)
			}
			f := newFixture(t, newSQLiteStore(t), prov, rt, func(c *Config) { c.ProviderWait = time.Millisecond })
			sink := newCollector()
			_, err := f.pool.Submit(context.Background(), Request{ThreadKey: "web:c", EventID: "e1", Text: "hi", Files: tt.files, Sink: sink})
			require.NoError(t, err)
			out := sink.wait(t, 1)[0]
			require.Error(t, out.Err)
			require.Equal(t, tt.want, ErrorCode(out.Err), "%v", out.Err)
			var e *Error
			require.ErrorAs(t, out.Err, &e, "the turn's error is classified where it was made")
		})
	}
}
