// Package proctree kills a run's processes from inside a sandbox: the ones that carry its mark in
// their environment or command line, the ones it names, and all their descendants. A runtime whose
// run outlived its exec (the exec's stream was cut, the bot crashed) stops it with this before a
// retry could run beside it. It uses only /proc, the shell's builtins, grep and pgrep, which busybox
// images have too.
package proctree

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// maxRounds bounds Kill: a round stops and kills all it finds, and the next checks that none is
// left (a process in uninterruptible sleep dies late; one forked as the round listed).
const maxRounds = 20

// Kill kills, in rounds of one exec each, the processes the seeds name and their descendants. A
// seed is NAME=VALUE (a process whose environment holds that entry; letters, digits and _ only),
// pid:N (that process), pat:REGEX (the processes whose command line matches, as pgrep -f) or
// run:FILE (a file holding "VALUE PID START": process PID, if VALUE is the value of one of the
// NAME=VALUE seeds and the process still has that start time, field 22 of /proc/PID/stat); with the
// seed need-run, a round whose run file names no such process takes nothing at all (the run ended,
// and what it left in the background is not a leftover). It
// ends after two rounds in a row find nothing: one empty round can miss a chain of short-lived
// processes, each forked by one that exited in the instant the round listed them. A sandbox gone or
// stopped has nothing left to kill.
func Kill(ctx context.Context, sb sandbox.Sandbox, seeds ...string) error {
	empty := 0
	for range maxRounds {
		var out, stderr strings.Builder
		res, err := sb.Exec(ctx, sandbox.ExecRequest{
			Cmd:    append([]string{"/bin/sh", "-c", Round, "sh"}, seeds...),
			Stdout: &out, Stderr: &stderr, Timeout: 30 * time.Second,
		})
		switch {
		case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrNotRunning):
			return nil // the processes went with the sandbox
		case err != nil:
			return err
		case res.ExitCode != 0:
			return fmt.Errorf("killing the run's processes exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
		}
		if strings.TrimSpace(out.String()) != "" {
			empty = 0
			continue
		}
		if empty++; empty == 2 {
			return nil
		}
	}
	return fmt.Errorf("the run's processes still run after %d rounds of kill", maxRounds)
}

// Round is one round of Kill, a script whose arguments are Kill's seeds; scripts that kill before
// they start a run (a crash's leftovers) run it themselves. It gathers the seeded processes and
// their descendants (by the parent in /proc/PID/stat: a child that cleared its environment is found
// so), stops them, and gathers again until nothing new turns up, so none forks a replacement unseen;
// then it kills them all at once and prints their pids (nothing: none found). Processes gone or
// dead (zombies, which a container without an init may never reap) are not taken, so a round after
// the kill finds nothing; the seeds are in this round's argv, never in its environment, and a
// pat: seed's text never matches its own regular expression where it matters (pgrep skips itself;
// "--(a|b) x" does not match "--a x"), so the round does not find itself; pid 1, the round and its
// ancestors (the shell that runs it, the exec, the bot itself on the local provider) are never taken,
// nor what descends from them through them, whatever a seed names.
const Round = `[ -r /proc/self/environ ] || { echo "threadbox: no /proc to find the run's processes in" >&2; exit 3; }
live() { { read -r l <"/proc/$1/stat"; } 2>/dev/null && set -- ${l##*) } && [ "$1" != Z ]; }
pats=; res=; pids=; run=; need=
for m; do case $m in
  pid:*) pids="$pids ${m#pid:}" ;;
  pat:*) res="$res
${m#pat:}" ;;
  run:*) run=${m#run:} ;;
  need-run) need=1 ;;
  *) pats="$pats -e $m" ;;
esac; done
X=" 1 $$ "; a=$$
while { read -r l <"/proc/$a/stat"; } 2>/dev/null && set -- ${l##*) } && [ "$2" -gt 1 ] 2>/dev/null; do X="$X$2 "; a=$2; done
S=" "
add() { case "$X$S" in *" $1 "*) return 1 ;; esac; S="$S$1 "; }
for p in $pids; do case $p in *[!0-9]*) ;; *) ! live "$p" || add "$p" ;; esac; done
if [ -n "$run" ] && [ -f "$run" ] && [ ! -h "$run" ] && { read -r t p s <"$run"; } 2>/dev/null && [ -n "$t" ] && [ -n "$p" ] && [ -n "$s" ] &&
  case $p$s in *[!0-9]*) false ;; esac && case "$pats " in *"=$t "*) ;; *) false ;; esac &&
  { read -r l <"/proc/$p/stat"; } 2>/dev/null && set -- ${l##*) } && [ "$1" != Z ] && [ "${20}" = "$s" ]; then
  add "$p"
fi
[ -z "$need" ] || [ "$S" != " " ] || exit 0
while :; do
  n=0
  for p in $([ -z "$pats" ] || grep -lszxF $pats /proc/[0-9]*/environ | sed 's|^/proc/||; s|/environ$||') $(
    printf '%s\n' "$res" | while IFS= read -r re; do [ -z "$re" ] || pgrep -f -- "$re"; done); do
    ! add "$p" || n=1
  done
  for f in /proc/[0-9]*/stat; do
    { read -r l <"$f"; } 2>/dev/null || continue
    set -- ${l##*) }
    [ "$1" != Z ] || continue
    case "$S" in *" $2 "*) ;; *) continue ;; esac
    p=${f#/proc/}; p=${p%/stat}
    ! add "$p" || n=1
  done
  [ $n = 1 ] || break
  kill -STOP $S 2>/dev/null
done
[ "$S" = " " ] || { kill -KILL $S 2>/dev/null; echo $S; }
exit 0`
