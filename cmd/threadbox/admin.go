package main

import (
	"context"
	"fmt"
)

// runAdmin is the operator CLI. The commands themselves (sessions, inspect, pause, resume, destroy,
// reap, drain, stats) arrive with the bot core; until then this says so rather than pretending.
func (m *Main) runAdmin(_ context.Context, args []string) error {
	fmt.Fprintln(m.Stderr, "threadbox admin: not available in this build yet (it ships with the bot core); use `threadbox doctor` to check the installation")
	return exitCode(2)
}
