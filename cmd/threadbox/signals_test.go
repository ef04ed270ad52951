package main

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSecondSignalForcesExit: the first SIGINT or SIGTERM starts the graceful shutdown (ctx ends);
// a second one, while turns drain, ends the process at once with 128+signal instead of being
// swallowed until the shutdown grace and the drains are over.
func TestSecondSignalForcesExit(t *testing.T) {
	for _, tt := range []struct {
		name  string
		first os.Signal
		again os.Signal
		code  int
	}{
		{"ctrl-c twice", os.Interrupt, os.Interrupt, 130},
		{"term then int", syscall.SIGTERM, os.Interrupt, 130},
		{"term twice", syscall.SIGTERM, syscall.SIGTERM, 143},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			forced := make(chan int, 1)
			ctx, stop := shutdownOnSignal(context.Background(), sigs, func(code int) { forced <- code })
			defer stop()
			require.NoError(t, ctx.Err())
			sigs <- tt.first
			<-ctx.Done()
			require.Empty(t, forced, "the first signal only starts the graceful shutdown")
			sigs <- tt.again
			require.Equal(t, tt.code, <-forced)
		})
	}
}

// TestSignalWatchStopsWithoutSignal: stop ends the watch (no goroutine left behind) and the context.
func TestSignalWatchStopsWithoutSignal(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	ctx, stop := shutdownOnSignal(context.Background(), sigs, func(int) { t.Error("forced without a signal") })
	stop()
	<-ctx.Done()
	sigs <- os.Interrupt // nobody listens any more: must not force
	stop()
}
