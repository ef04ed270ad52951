package agentpool

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// newSQLiteStore opens a migrated store on a fresh SQLite file.
func newSQLiteStore(t testing.TB) db.Store {
	t.Helper()
	st, err := db.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "tb.db"), db.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// eachStore runs f as a subtest on a fresh SQLite store and on PostgreSQL (skipped when absent,
// unless THREADBOX_REQUIRE_SERVICES is set).
func eachStore(t *testing.T, f func(t *testing.T, st db.Store)) {
	for _, sc := range []struct {
		name string
		open func(t *testing.T) db.Store
	}{
		{"sqlite", func(t *testing.T) db.Store { return newSQLiteStore(t) }},
		{"postgres", func(t *testing.T) db.Store { return dbtest.OpenPostgres(t) }},
	} {
		t.Run(sc.name, func(t *testing.T) { f(t, sc.open(t)) })
	}
}

// scriptRuntime is a runtime.Runtime whose behaviour tests script. It records every prompt.
type scriptRuntime struct {
	mu       sync.Mutex
	prompts  []runtime.Prompt
	sessions int
	// promptFunc answers a prompt; nil echoes the text.
	promptFunc func(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error)
	// ensureErrs are returned by successive Ensure calls.
	ensureErrs []error
	// ensureFunc, when set, runs on every Ensure.
	ensureFunc func(ctx context.Context) error
	// sessionGone makes Session report the previous id as gone once.
	sessionGone bool
	aborted     int
}

var _ runtime.Runtime = (*scriptRuntime)(nil)

func (r *scriptRuntime) Name() string { return "script" }

func (r *scriptRuntime) Ensure(ctx context.Context, sb sandbox.Sandbox) error {
	r.mu.Lock()
	f := r.ensureFunc
	r.mu.Unlock()
	if f != nil {
		return f(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ensureErrs) > 0 {
		err := r.ensureErrs[0]
		r.ensureErrs = r.ensureErrs[1:]
		return err
	}
	return nil
}

func (r *scriptRuntime) Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (string, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prevID != "" && !r.sessionGone {
		return prevID, false, nil
	}
	replaced := prevID != ""
	r.sessionGone = false
	r.sessions++
	return fmt.Sprintf("s%d", r.sessions), replaced, nil
}

func (r *scriptRuntime) Prompt(ctx context.Context, sb sandbox.Sandbox, sid string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	r.mu.Lock()
	r.prompts = append(r.prompts, p)
	f := r.promptFunc
	r.mu.Unlock()
	if f != nil {
		return f(ctx, sb, sid, p, emit)
	}
	emit(runtime.Event{Kind: runtime.EventText, Text: "working"})
	return runtime.Result{Answer: "echo: " + p.Text}, nil
}

func (r *scriptRuntime) Abort(ctx context.Context, sb sandbox.Sandbox, sid string) error {
	r.mu.Lock()
	r.aborted++
	r.mu.Unlock()
	return nil
}

func (r *scriptRuntime) recorded() []runtime.Prompt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Prompt(nil), r.prompts...)
}

// collector is a Sink that records outcomes and signals each one.
type collector struct {
	mu       sync.Mutex
	outcomes []Outcome
	events   int
	got      chan Outcome
}

func newCollector() *collector { return &collector{got: make(chan Outcome, 1000)} }

func (c *collector) Progress(runtime.Event) { c.mu.Lock(); c.events++; c.mu.Unlock() }

func (c *collector) Deliver(ctx context.Context, out Outcome) ([]string, error) {
	c.mu.Lock()
	c.outcomes = append(c.outcomes, out)
	c.mu.Unlock()
	ids := make([]string, len(out.Artifacts))
	for i := range ids {
		ids[i] = fmt.Sprintf("F%d-%d", out.TurnID, i)
	}
	c.got <- out
	return ids, nil
}

func (c *collector) wait(t testing.TB, n int) []Outcome {
	t.Helper()
	var outs []Outcome
	for range n {
		outs = append(outs, <-c.got)
	}
	return outs
}

type fixture struct {
	pool  *Pool
	store db.Store
	prov  sandbox.Provider
	rt    runtime.Runtime
}

func newFixture(t testing.TB, st db.Store, prov sandbox.Provider, rt runtime.Runtime, mod ...func(*Config)) fixture {
	t.Helper()
	cfg := Config{Deployment: "test-" + strings.ToLower(randomSuffix()), Image: "threadbox/sandbox-test:latest",
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 128, ExecTimeout: 0}}
	cfg.Resources.ExecTimeout = sandbox.ExecTimeoutRange[1]
	for _, m := range mod {
		m(&cfg)
	}
	p, err := New(cfg, Deps{Store: st, Provider: prov, Runtime: rt, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return fixture{pool: p, store: st, prov: prov, rt: rt}
}

func submit(t testing.TB, p *Pool, thread, event, text string, sink Sink) Ticket {
	t.Helper()
	tk, err := p.Submit(context.Background(), Request{ThreadKey: thread, Platform: "test", ChannelID: "c", UserID: "u", EventID: event, Text: text, Sink: sink})
	require.NoError(t, err)
	return tk
}

var _ = sandboxfake.New

func randomSuffix() string {
	var b [4]byte
	_, _ = cryptorand.Read(b[:])
	return hex.EncodeToString(b[:])
}
