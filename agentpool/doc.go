// Package agentpool runs turns: one serial queue per thread, and for each turn the resolve → ensure →
// prompt → collect → record sequence of DESIGN §1, healing the thread's sandbox on the way (the
// failure matrix of DESIGN §6). It also hosts the background loops (idle-pause, cleanup, reconcile,
// reaper, watchdog) that run on the leader only.
//
// Every session transition, whoever asks for it (a turn, an admin command, a loop), is made by one
// component, the lifecycle (lifecycle.go), whose doc comment is the table of decisions. Its writes that
// follow a provider call are fenced to the sandbox generation they acted on.
//
// The pool knows nothing about chat platforms: it reports progress and the outcome to a Sink the bot
// supplies.
//
// # Locking
//
// Two layers serialize a thread. In process, the pool's per-key queue runs one turn at a time. Across
// replicas, each turn holds db.Store.LockThread for its whole run (a Postgres advisory lock; on SQLite,
// where only one process may open the database, an in-process mutex). The loops take the same lock, so
// a sandbox is never paused or destroyed under a running turn, and two replicas never create two
// sandboxes for one thread.
//
// # Retries
//
// A prompt that fails as session-missing or sandbox-down is retried once, after one re-resolve. A
// sandbox create is retried only when the provider says it surely did nothing (sandbox.ErrNoEffect);
// anything else is left to the orphan reaper, which finds sandboxes by their labels. A provider outage
// (sandbox.ErrUnavailable) holds a turn, retrying with backoff, for up to Config.ProviderWait.
package agentpool
