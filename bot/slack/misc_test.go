package slack

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTasksCloseAndWait(t *testing.T) {
	q := newTasks()
	gate := make(chan struct{})
	var ran sync.WaitGroup
	ran.Add(2)
	for range 2 {
		require.True(t, q.add(func() { <-gate; ran.Done() }))
	}
	q.close()
	require.False(t, q.add(func() {}), "closed")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, q.wait(ctx), context.Canceled, "work still runs")
	close(gate)
	require.NoError(t, q.wait(t.Context()))
	ran.Wait()
}
