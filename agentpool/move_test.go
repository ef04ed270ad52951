package agentpool

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// chooserWS is a Workspace a thread chooses: it writes the chosen name into each new sandbox, and
// reports a file named "dirty" as unsaved work.
type chooserWS struct {
	mu      sync.Mutex
	current map[string]string // by thread
}

var _ WorkspaceChooser = (*chooserWS)(nil)

func (w *chooserWS) get(key string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current[key]
}

func (w *chooserWS) Prepare(ctx context.Context, sb sandbox.Sandbox, t WorkspaceThread) (string, error) {
	name := w.get(t.ThreadKey)
	if name == "" {
		return "", nil
	}
	if _, err := sb.ReadFile(ctx, "repo.txt", 1024); err == nil {
		return "", nil
	}
	return "checked out " + name, sb.WriteFile(ctx, "repo.txt", []byte(name), 0o644)
}

func (w *chooserWS) Choose(_ context.Context, t WorkspaceThread, choice string) (Choice, error) {
	if choice == "bad" {
		return Choice{}, &WorkspaceError{Text: "not allowed", Err: errors.New("off the list")}
	}
	prev := w.get(t.ThreadKey)
	return Choice{Name: choice, Previous: prev, Same: prev == choice, Record: func(context.Context) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.current[t.ThreadKey] = choice
		return nil
	}}, nil
}

func (w *chooserWS) Unsaved(ctx context.Context, sb sandbox.Sandbox, _ WorkspaceThread) (string, error) {
	_, err := sb.ReadFile(ctx, "dirty", 1024)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", err
	}
	return "dirty work", nil
}

func moveNow(t *testing.T, p *Pool, key, choice string, force bool) (MoveResult, error) {
	t.Helper()
	type res struct {
		r   MoveResult
		err error
	}
	got := make(chan res, 1)
	require.NoError(t, p.Move(MoveRequest{Thread: WorkspaceThread{ThreadKey: key}, Choice: choice, Force: force},
		func(r MoveResult, err error) { got <- res{r, err} }))
	select {
	case r := <-got:
		return r.r, r.err
	case <-time.After(time.Minute):
		t.Fatal("no move outcome")
		return MoveResult{}, nil
	}
}

// TestMoveIsOrderedAndKeepsUnsavedWork: a move queues behind the running turn and before the next
// message, which runs in a new sandbox holding the new choice; work the workspace calls unsaved
// blocks a move unless forced; a bad choice changes nothing; a thread with no session only records.
func TestMoveIsOrderedAndKeepsUnsavedWork(t *testing.T) {
	st, prov := newSQLiteStore(t), sandboxfake.New()
	release := make(chan struct{})
	var seen sync.Map // prompt text → repo.txt when it ran
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, sb sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		if p.Text == "block" {
			<-release
		}
		if p.Text == "make dirty" {
			if err := sb.WriteFile(ctx, "dirty", []byte("x"), 0o644); err != nil {
				return runtime.Result{}, err
			}
		}
		b, _ := sb.ReadFile(ctx, "repo.txt", 1024)
		seen.Store(p.Text, string(b))
		return runtime.Result{Answer: "ok"}, nil
	}}
	ws := &chooserWS{current: map[string]string{"k": "app"}}
	p, err := New(Config{Deployment: "move-" + randomSuffix(), Image: "img",
		Resources: sandbox.Resources{MemoryMB: 512, CPUs: 1, PIDs: 128, ExecTimeout: sandbox.ExecTimeoutRange[1]}},
		Deps{Store: st, Provider: prov, Runtime: rt, Logger: zaptest.NewLogger(t), Workspace: ws})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	c := newCollector()

	submit(t, p, "k", "e1", "block", c)
	moved, moveErr := make(chan MoveResult, 1), make(chan error, 1)
	require.NoError(t, p.Move(MoveRequest{Thread: WorkspaceThread{ThreadKey: "k"}, Choice: "lib"}, func(r MoveResult, err error) {
		moveErr <- err
		moved <- r
	}))
	submit(t, p, "k", "e2", "after", c)
	select {
	case <-moved:
		t.Fatal("the move ran before the turn ahead of it finished")
	default:
	}
	close(release)
	outs := c.wait(t, 2)
	require.NoError(t, outs[0].Err)
	require.NoError(t, outs[1].Err)
	require.NoError(t, <-moveErr)
	r := <-moved
	require.True(t, r.Replaced)
	require.Equal(t, "app", r.Choice.Previous)
	v, _ := seen.Load("block")
	require.Equal(t, "app", v)
	v, _ = seen.Load("after")
	require.Equal(t, "lib", v, "the message sent after the move ran in the new workspace")
	require.Equal(t, "checked out lib", outs[1].Workspace)
	sess, err := st.SessionGet(t.Context(), "k")
	require.NoError(t, err)
	require.EqualValues(t, 2, sess.Generation, "a new sandbox")

	// Unsaved work blocks the move, and the sandbox is kept.
	submit(t, p, "k", "e3", "make dirty", c)
	require.NoError(t, c.wait(t, 1)[0].Err)
	r, err = moveNow(t, p, "k", "other", false)
	require.ErrorIs(t, err, ErrUnsaved)
	var we *WorkspaceError
	require.ErrorAs(t, err, &we)
	require.Equal(t, "dirty work", we.Text)
	require.Equal(t, "dirty work", r.Lost)
	require.Equal(t, "lib", ws.get("k"), "nothing recorded")
	after, err := st.SessionGet(t.Context(), "k")
	require.NoError(t, err)
	require.Equal(t, sess.SandboxID, after.SandboxID, "the sandbox was kept")

	// A bad choice, and the same choice: nothing changes.
	_, err = moveNow(t, p, "k", "bad", false)
	require.ErrorAs(t, err, &we)
	require.Equal(t, "not allowed", we.Text)
	r, err = moveNow(t, p, "k", "lib", false)
	require.NoError(t, err)
	require.True(t, r.Choice.Same)
	require.False(t, r.Replaced)

	// Forced: moved, and the loss is reported.
	r, err = moveNow(t, p, "k", "other", true)
	require.NoError(t, err)
	require.True(t, r.Replaced)
	require.Equal(t, "dirty work", r.Lost)
	require.Equal(t, "other", ws.get("k"))

	// A thread with no session yet: only recorded.
	r, err = moveNow(t, p, "fresh", "lib", false)
	require.NoError(t, err)
	require.False(t, r.Replaced)
	require.Equal(t, "lib", ws.get("fresh"))

	// A pool whose workspace takes no choices refuses at once.
	plain := newFixture(t, newSQLiteStore(t), sandboxfake.New(), &scriptRuntime{})
	err = plain.pool.Move(MoveRequest{Thread: WorkspaceThread{ThreadKey: "k"}, Choice: "lib"}, func(MoveResult, error) {})
	require.ErrorIs(t, err, ErrNoChooser)
}
