package agentpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestQueueCapConcurrent: many submits racing on one thread take at most MaxQueued places; the
// check and the add are one step, so no submit slips in between another's check and its add.
func TestQueueCapConcurrent(t *testing.T) {
	const limit, submitters = 3, 16
	gate := make(chan struct{})
	// Opened on any exit, so a failed assertion does not leave the pool's shutdown waiting on it.
	openGate := sync.OnceFunc(func() { close(gate) })
	rt := &scriptRuntime{promptFunc: func(ctx context.Context, _ sandbox.Sandbox, _ string, p runtime.Prompt, _ func(runtime.Event)) (runtime.Result, error) {
		<-gate
		return runtime.Result{Answer: p.Text}, nil
	}}
	f := newFixture(t, newSQLiteStore(t), sandboxfake.New(), rt, func(c *Config) { c.MaxQueued = limit })
	t.Cleanup(openGate) // after the fixture's, so it runs before the pool's shutdown
	sink := newCollector()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused := 0, 0
	for i := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ev := fmt.Sprintf("e%d", i)
			_, err := f.pool.Submit(t.Context(), Request{ThreadKey: "k", EventID: ev, Text: ev, Sink: sink})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, ErrQueueFull):
				refused++
			default:
				t.Errorf("submit %s: %v", ev, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Equal(t, limit, accepted, "nothing runs to the end while the gate is shut, so exactly MaxQueued fit")
	require.Equal(t, submitters-limit, refused)
	require.LessOrEqual(t, f.pool.Depth("k"), limit)
	openGate()
	sink.wait(t, limit)
}
