package shell

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime/internal/proctree"
	"github.com/threadbox/threadbox/sandbox"
)

// runEnv tags every process of one command's run (Prompt) with a value of its own. Abort kills by
// that tag rather than by pid or process group: children that were reparented, called setsid or
// daemonized inherit the environment, and the exec that started them may be gone (its stream cut)
// while they run on, which the provider's own kill of its exec cannot then reach. A child that
// cleared its environment (env -i, sudo) is still found while its tagged parent lives: a round
// takes the tagged processes' descendants too. One tag per run, not per session, so Abort never
// kills what an earlier command of the thread left running on purpose (a server in the background).
const runEnv = "THREADBOX_SHELL_RUN"

// Abort implements runtime.Runtime: it kills every process of the session's commands that may still
// run (cut, stopped or timed out rather than exited), and returns once none is left. The pool calls
// it when a turn ends without the command's end: a command whose exec stream was cut (a Docker
// daemon restart with live-restore, a lost connection to a cloud provider) runs on in the sandbox,
// and a retry would otherwise run it a second time beside the first. A sandbox that is gone or
// stopped took the commands with it. ctx bounds it (the pool gives it seconds). Tags it could not
// clear stay, and the session's next command tries again before it starts.
func (r *Runtime) Abort(ctx context.Context, sb sandbox.Sandbox, sessionID string) error {
	key := runKey{sb.Handle().ID, sessionID}
	tags := r.pending(key)
	if len(tags) == 0 {
		return nil
	}
	if err := killTagged(ctx, sb, tags); err != nil {
		return fmt.Errorf("shell runtime: abort: %w", err)
	}
	r.ended(key, tags...)
	return nil
}

// abortLeftovers is what Prompt does first when an Abort failed to clear an earlier command of the
// session (its deadline passed, the sandbox was busy): one more try, within a bound of its own, so
// the new command (a retry, often) does not run beside the old one. Whatever the outcome the tags
// are then forgotten: a sandbox in which it cannot be done (no /proc) would otherwise be asked on
// every command.
func (r *Runtime) abortLeftovers(ctx context.Context, sb sandbox.Sandbox, key runKey) {
	tags := r.pending(key)
	if len(tags) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leftoverTimeout)
	defer cancel()
	_ = killTagged(ctx, sb, tags)
	r.ended(key, tags...)
}

// leftoverTimeout bounds abortLeftovers, which delays the command it runs before.
const leftoverTimeout = 10 * time.Second

// pending returns the tags of the session's commands that may still run.
func (r *Runtime) pending(key runKey) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs[key])
}

// started records a command's tag as it is handed over.
func (r *Runtime) started(key runKey, tag string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[key] = append(r.runs[key], tag)
}

// ended forgets commands that can no longer be running; those of later runs stay.
func (r *Runtime) ended(key runKey, tags ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	left := slices.DeleteFunc(r.runs[key], func(t string) bool { return slices.Contains(tags, t) })
	if len(left) == 0 {
		delete(r.runs, key)
		return
	}
	r.runs[key] = left
}

// killTagged kills every process whose environment holds one of the tags, their descendants, and
// the run file's command if it is one of them and still runs (it may have cleared its environment).
func killTagged(ctx context.Context, sb sandbox.Sandbox, tags []string) error {
	seeds := []string{"run:" + runFile}
	for _, t := range tags {
		seeds = append(seeds, runEnv+"="+t)
	}
	return proctree.Kill(ctx, sb, seeds...)
}
