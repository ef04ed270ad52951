package main

import (
	"context"
	"os"
	"sync"
	"syscall"
)

// shutdownOnSignal returns a context that the first signal on sigs cancels: serve then shuts down
// gracefully (running turns get lifecycle.shutdown_grace). A second signal calls force with the
// shell's exit code for it (128 + its number): an operator pressing Ctrl-C again, or an orchestrator
// done waiting, ends the process now. That is safe: sandboxes outlive the process and the next
// start takes its turns over, as after a crash. stop ends the watch and waits for it.
func shutdownOnSignal(parent context.Context, sigs <-chan os.Signal, force func(code int)) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			force(signalExitCode(s))
		case <-done:
		}
	})
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			cancel()
		})
	}
}

// signalExitCode is the exit status a shell reports for a process ended by s.
func signalExitCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}
