// Package sandbox defines what Threadbox needs from an isolated execution environment, and nothing about
// how any one provider gives it.
//
// The seam follows database/sql/driver and Nomad's task drivers: a small required interface (Provider)
// with ctx on every call, optional capabilities discovered by type assertion (Dialer, StatsReader,
// Snapshotter, TreeReader), and sentinel errors matched with errors.Is:
//
//   - ErrNotFound means the sandbox is gone: the caller recreates it.
//   - ErrNotRunning means it exists but is stopped: the caller starts it.
//   - ErrUnsupported means the provider cannot do this at all.
//
// Provider SDK and wire types never leave the provider's own package (sandbox/docker, …). A Handle is
// what the rest of the system stores: it is JSON, versioned, and carries the provider's private state.
//
// # Retry rules
//
// A provider must not return a retryable error from Create if the sandbox may have been created (the
// database/sql ErrBadConn rule). Callers therefore retry Create only on errors that wrap ErrNoEffect;
// anything else is left to the orphan reaper, which finds sandboxes by label.
package sandbox
