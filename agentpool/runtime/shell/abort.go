package shell

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// runEnv tags every process of one command's run (Prompt) with a value of its own. Abort kills by
// that tag rather than by pid or process group: children that were reparented, called setsid or
// daemonized inherit the environment, and the exec that started them may be gone (its stream cut)
// while they run on, which the provider's own kill of its exec cannot then reach. One tag per run,
// not per session, so Abort never kills what an earlier command of the thread left running on
// purpose (a server in the background).
const runEnv = "THREADBOX_SHELL_RUN"

// Abort implements runtime.Runtime: it kills every process of the session's last command, if that
// command may still run (it was cut, stopped or timed out rather than exited), and returns once none
// is left. The pool calls it when a turn ends without the command's end: a command whose exec stream
// was cut (a Docker daemon restart with live-restore, a lost connection to a cloud provider) runs on
// in the sandbox, and a retry would otherwise run it a second time beside the first. A sandbox that
// is gone or stopped took the command with it. ctx bounds it (the pool gives it seconds).
func (r *Runtime) Abort(ctx context.Context, sb sandbox.Sandbox, sessionID string) error {
	key := runKey{sb.Handle().ID, sessionID}
	r.mu.Lock()
	tag := r.runs[key]
	r.mu.Unlock()
	if tag == "" {
		return nil
	}
	if err := killTagged(ctx, sb, runEnv+"="+tag); err != nil {
		return fmt.Errorf("shell runtime: abort: %w", err)
	}
	r.ended(key, tag)
	return nil
}

// ended forgets a run that can no longer be running, unless a later run of the session replaced it.
func (r *Runtime) ended(key runKey, tag string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[key] == tag {
		delete(r.runs, key)
	}
}

// maxKillRounds bounds killTagged: a round finds what the round before missed (a process forked
// between them), so a handful suffices; more means processes that do not die.
const maxKillRounds = 20

// killTagged kills every process whose environment holds the entry marker, from inside the sandbox,
// in rounds of one exec each (as the Docker provider kills an exec's processes): each round stops,
// then kills, the pids the round before found, and lists those still carrying the marker; it ends
// when a round finds none. Stopping them all before killing any keeps them from forking
// replacements meanwhile. It uses only /proc, the shell's builtins and grep, which busybox images
// have too.
func killTagged(ctx context.Context, sb sandbox.Sandbox, marker string) error {
	var pids []string
	for range maxKillRounds {
		var out, stderr strings.Builder
		res, err := sb.Exec(ctx, sandbox.ExecRequest{
			Cmd:    append([]string{"/bin/sh", "-c", killRound, "sh", marker}, pids...),
			Stdout: &out, Stderr: &stderr, Timeout: 30 * time.Second,
		})
		switch {
		case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrNotRunning):
			return nil // the processes went with the sandbox
		case err != nil:
			return err
		case res.ExitCode > 2:
			// grep exits 0 (some found), 1 (none) or 2 (another user's environ was unreadable):
			// its list is good. Anything else is the round failing.
			return fmt.Errorf("looking for the command's processes exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
		}
		pids = pids[:0]
		for _, f := range strings.Fields(out.String()) {
			if pid, ok := strings.CutSuffix(strings.TrimPrefix(f, "/proc/"), "/environ"); ok {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return nil
		}
	}
	return fmt.Errorf("the command's processes still run after %d rounds of kill: %v", maxKillRounds, pids)
}

// killRound is one round of killTagged: $1 is the marker, the rest the pids to kill. Zombies have an
// empty environ and do not match; the marker is in this round's argv, never in its environment, so
// the round does not find itself.
const killRound = `m=$1; shift
[ -r /proc/self/environ ] || { echo "threadbox: no /proc to find the command's processes in" >&2; exit 3; }
[ $# -eq 0 ] || { kill -STOP "$@"; kill -KILL "$@"; } 2>/dev/null
exec grep -lszxF "$m" /proc/[0-9]*/environ`
