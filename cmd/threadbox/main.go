// Command threadbox is the Threadbox bot: `threadbox serve | migrate | doctor | admin … | version`.
//
// main stays thin: Main parses flags and config and runs one subcommand, so end-to-end tests drive the
// same code as the binary (after benbjohnson/wtf's cmd/wtfd).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/threadbox/threadbox/cmd/threadbox/logging"
)

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := shutdownOnSignal(context.Background(), sigs, func(code int) {
		fmt.Fprintln(os.Stderr, "threadbox: second signal: exiting now, without waiting for running turns (the next start takes them over)")
		os.Exit(code)
	})
	defer stop()
	gcPolicyFor(os.Getenv, cgroupMemoryMax).apply()
	m := NewMain(os.Stdout, os.Stderr, os.Environ())
	code := 0
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		code = reportErr(m, err)
	} else if err := m.Run(ctx); err != nil {
		code = reportErr(m, err)
	}
	if err := m.Close(); err != nil && code == 0 {
		code = reportErr(m, err)
	}
	os.Exit(code)
}

func reportErr(m *Main, err error) int {
	if err == errUsage {
		return 2
	}
	if ec, ok := err.(exitCode); ok {
		return int(ec)
	}
	// Not through the logger, so redacted here: a driver's error can quote database.url.
	fmt.Fprintf(m.Stderr, "threadbox: %s\n", logging.RedactURLs(err.Error()))
	return 1
}
