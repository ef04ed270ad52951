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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
	fmt.Fprintf(m.Stderr, "threadbox: %v\n", err)
	return 1
}
