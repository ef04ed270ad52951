package shell

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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

// maxKillRounds bounds killTagged: a round stops and kills all it finds, and the next checks that
// none is left (a process in uninterruptible sleep dies late; one forked as the round listed).
const maxKillRounds = 20

// killTagged kills every process whose environment holds one of the tags, and their descendants,
// from inside the sandbox, in rounds of one exec each. It ends after two rounds in a row find
// nothing: one empty round can miss a chain of short-lived processes, each forked by one that
// exited in the instant the round listed them. It uses only /proc, the shell's builtins and grep,
// which busybox images have too.
func killTagged(ctx context.Context, sb sandbox.Sandbox, tags []string) error {
	markers := make([]string, len(tags))
	for i, t := range tags {
		markers[i] = runEnv + "=" + t
	}
	empty := 0
	for range maxKillRounds {
		var out, stderr strings.Builder
		res, err := sb.Exec(ctx, sandbox.ExecRequest{
			Cmd:    append([]string{"/bin/sh", "-c", killRound, "sh", "run:" + runFile}, markers...),
			Stdout: &out, Stderr: &stderr, Timeout: 30 * time.Second,
		})
		switch {
		case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrNotRunning):
			return nil // the processes went with the sandbox
		case err != nil:
			return err
		case res.ExitCode != 0:
			return fmt.Errorf("killing the command's processes exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
		}
		if strings.TrimSpace(out.String()) != "" {
			empty = 0
			continue
		}
		if empty++; empty == 2 {
			return nil
		}
	}
	return fmt.Errorf("the command's processes still run after %d rounds of kill", maxKillRounds)
}

// killRound is one round of killTagged; its arguments are the markers (runEnv=tag, letters and
// digits only), pids to take as well (pid:N, a command's main process known to run: it may have
// cleared its environment), and the start script's runFile (run:FILE), whose main process is taken
// when its tag is one of the markers and it still runs (the same start time). It gathers the processes carrying a marker and their descendants (by the parent in
// /proc/PID/stat; a child that cleared its environment is found so), stops them, and gathers again
// until nothing new turns up, so none forks a replacement unseen; then it kills them all at once
// and prints their pids (nothing: none found). Zombies have an empty environ and do not match; the
// markers are in this round's argv, never in its environment, so the round does not find itself;
// pid 1 and the round itself are never taken.
const killRound = `[ -r /proc/self/environ ] || { echo "threadbox: no /proc to find the command's processes in" >&2; exit 3; }
pats=; S=" "; run=
for m; do case $m in pid:*) S="$S${m#pid:} " ;; run:*) run=${m#run:} ;; *) pats="$pats -e $m" ;; esac; done
if [ -n "$run" ] && [ -f "$run" ] && [ ! -h "$run" ] && { read -r t p s <"$run"; } 2>/dev/null && [ -n "$p" ] && [ -n "$s" ] &&
  case $p$s in *[!0-9]*) false ;; esac && case "$pats " in *" -e ` + runEnv + `=$t "*) ;; *) false ;; esac &&
  { read -r l <"/proc/$p/stat"; } 2>/dev/null && set -- ${l##*) } && [ "${20}" = "$s" ]; then
  S="$S$p "
fi
while :; do
  n=0
  for f in $([ -z "$pats" ] || grep -lszxF $pats /proc/[0-9]*/environ); do
    p=${f#/proc/}; p=${p%/environ}
    case "$S" in *" $p "*) ;; *) S="$S$p "; n=1 ;; esac
  done
  for f in /proc/[0-9]*/stat; do
    { read -r l <"$f"; } 2>/dev/null || continue
    set -- ${l##*) }
    case "$S" in *" $2 "*) ;; *) continue ;; esac
    p=${f#/proc/}; p=${p%/stat}
    case "$S" in *" $p "*) ;; *) S="$S$p "; n=1 ;; esac
  done
  S=$(for p in $S; do [ "$p" = 1 ] || [ "$p" = $$ ] || printf ' %s' "$p"; done)" "
  [ $n = 1 ] || break
  [ "$S" = " " ] || kill -STOP $S 2>/dev/null
done
[ "$S" = " " ] || { kill -KILL $S 2>/dev/null; echo $S; }
exit 0`
