package agentpool

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// The admin commands that look into a thread's sandbox: logs, stats and attach. They only read: they
// take no thread lock and never start, stop or create a sandbox, so an operator can look into a
// thread while a turn is stuck in it. The bot words the results (DESIGN §10: no English here).

// SandboxView is a thread's sandbox as the inspection commands found it.
type SandboxView struct {
	ThreadKey string
	Provider  string
	// Runtime is the agent runtime the thread's sandbox runs.
	Runtime    string
	SandboxID  string
	Generation int64
	// State is the provider's word for it ("running", "stopped", …), StateMissing when the provider
	// has no such sandbox, StateNone when the session has none.
	State string
}

// Running reports whether the sandbox can be looked into.
func (v SandboxView) Running() bool { return v.State == string(sandbox.StateRunning) }

// Sandbox states besides the provider's.
const (
	StateNone    = "none"
	StateMissing = "missing"
)

// RuntimeLog is the tail of the runtime's own log in the thread's sandbox.
type RuntimeLog struct {
	SandboxView
	Runtime string
	// Path is where the runtime's server logs; "" when the runtime keeps no log of its own.
	Path string
	// Tail is the last lines asked for (empty when there is no log or the sandbox does not run).
	Tail string
	// Truncated: the tail was cut at MaxLogBytes.
	Truncated bool
}

// SandboxUsage is the thread's sandbox's resource use.
type SandboxUsage struct {
	SandboxView
	// HasStats is false when the provider reports no resource use (no sandbox.StatsReader).
	HasStats bool
	sandbox.Stats
	// DiskBytes is the size of the working directory (du), or -1 when it could not be measured.
	DiskBytes int64
}

// Attach is how an operator opens a shell in the thread's sandbox.
type Attach struct {
	SandboxView
	// Command is the exact command to run ("" when the provider offers no shell access).
	Command string
}

// Bounds of the inspection commands.
const (
	DefaultLogLines = 50
	MaxLogLines     = 1000
	// MaxLogBytes bounds a tail, so a log of long lines cannot flood the chat.
	MaxLogBytes = 32 << 10
	inspectExec = 15 * time.Second
)

// view finds the thread's sandbox and asks the provider what state it is in.
func (p *Pool) view(ctx context.Context, threadKey string) (SandboxView, sandbox.Handle, error) {
	sess, err := p.store.SessionGet(ctx, threadKey)
	if err != nil {
		return SandboxView{}, sandbox.Handle{}, classify(ENOTFOUND, "session "+threadKey, err)
	}
	v := SandboxView{ThreadKey: threadKey, Provider: sess.Provider, Runtime: p.runtimeOf(sess).Name(), SandboxID: sess.SandboxID, Generation: sess.Generation, State: StateNone}
	h, err := p.life.handle(sess)
	if err != nil || h.IsZero() || sess.Status == db.SessionDestroyed {
		return v, h, nil
	}
	info, err := p.life.provOf(h).Inspect(ctx, h)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		v.State = StateMissing
		return v, h, nil
	case err != nil:
		return v, h, classify(ESANDBOX, "inspect sandbox", err)
	}
	v.State = string(info.State)
	return v, h, nil
}

// RuntimeLog tails the runtime's own log in the thread's sandbox (lines ≤ 0: DefaultLogLines).
func (p *Pool) RuntimeLog(ctx context.Context, threadKey string, lines int) (RuntimeLog, error) {
	if lines <= 0 {
		lines = DefaultLogLines
	}
	lines = min(lines, MaxLogLines)
	v, h, err := p.view(ctx, threadKey)
	rt := p.rts.pick(v.Runtime)
	out := RuntimeLog{SandboxView: v, Runtime: rt.Name()}
	if err != nil {
		return out, err
	}
	lf, ok := rt.(runtime.LogFile)
	if !ok {
		return out, nil
	}
	out.Path = lf.LogPath()
	if !v.Running() {
		return out, nil
	}
	var b strings.Builder
	// tail of a log not written yet (the server never launched) says so on stderr: keep it.
	res, err := sandbox.Bind(p.life.provOf(h), h).Exec(ctx, sandbox.ExecRequest{
		Cmd: []string{"tail", "-n", strconv.Itoa(lines), "--", out.Path}, Stdout: &b, Stderr: &b,
		Timeout: inspectExec, MaxOutput: MaxLogBytes,
	})
	if err != nil {
		return out, classify(ESANDBOX, "tail the runtime log", err)
	}
	out.Tail, out.Truncated = b.String(), res.Truncated
	return out, nil
}

// SandboxUsage reads the thread's sandbox's resource use and the size of its working directory.
func (p *Pool) SandboxUsage(ctx context.Context, threadKey string) (SandboxUsage, error) {
	v, h, err := p.view(ctx, threadKey)
	out := SandboxUsage{SandboxView: v, DiskBytes: -1}
	if err != nil || !v.Running() {
		return out, err
	}
	if sr, ok := sandbox.As[sandbox.StatsReader](p.life.provOf(h)); ok {
		st, err := sr.Stats(ctx, h)
		if err != nil {
			return out, classify(ESANDBOX, "read sandbox stats", err)
		}
		out.HasStats, out.Stats = true, st
	}
	var b strings.Builder
	res, err := sandbox.Bind(p.life.provOf(h), h).Exec(ctx, sandbox.ExecRequest{
		Cmd: []string{"du", "-sk", "."}, Stdout: &b, Timeout: inspectExec, MaxOutput: 4 << 10,
	})
	if err == nil && res.ExitCode == 0 {
		if f := strings.Fields(b.String()); len(f) > 0 {
			if kb, perr := strconv.ParseInt(f[0], 10, 64); perr == nil {
				out.DiskBytes = kb << 10
			}
		}
	}
	return out, nil
}

// Attach says how to open a shell in the thread's sandbox: bash when the image has it, else sh.
func (p *Pool) Attach(ctx context.Context, threadKey string) (Attach, error) {
	v, h, err := p.view(ctx, threadKey)
	out := Attach{SandboxView: v}
	if err != nil || v.State == StateNone || v.State == StateMissing {
		return out, err
	}
	at, ok := sandbox.As[sandbox.Attacher](p.life.provOf(h))
	if !ok {
		return out, nil
	}
	shell := "bash"
	if v.Running() {
		res, err := sandbox.Bind(p.life.provOf(h), h).Exec(ctx, sandbox.ExecRequest{
			Cmd: []string{"/bin/sh", "-c", "command -v bash"}, Timeout: inspectExec,
		})
		if err == nil && res.ExitCode != 0 {
			shell = "sh"
		}
	}
	argv, err := at.AttachCommand(ctx, h, shell)
	if err != nil {
		return out, classify(ESANDBOX, "attach command", err)
	}
	out.Command = shellJoin(argv)
	return out, nil
}

// shellJoin quotes argv for a POSIX shell, only where needed.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@,+") == "" {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// RuntimeLog implements bot.AdminOps.
func (o Ops) RuntimeLog(ctx context.Context, k string, lines int) (RuntimeLog, error) {
	return o.Pool.RuntimeLog(ctx, k, lines)
}

// SandboxUsage implements bot.AdminOps.
func (o Ops) SandboxUsage(ctx context.Context, k string) (SandboxUsage, error) {
	return o.Pool.SandboxUsage(ctx, k)
}

// Attach implements bot.AdminOps.
func (o Ops) Attach(ctx context.Context, k string) (Attach, error) { return o.Pool.Attach(ctx, k) }
