package deno

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// killTree kills every process carrying the marker, in rounds, from a process that does not carry it.
const killTree = `m=$1; n=0
while :; do
  set -- $(grep -lszxF "$m" /proc/[0-9]*/environ | sed -e 's,^/proc/,,' -e 's,/environ$,,')
  [ $# -eq 0 ] && exit 0
  kill -STOP "$@" 2>/dev/null; kill -KILL "$@" 2>/dev/null
  n=$((n+1)); [ $n -lt 100 ] || exit 1
  sleep 0.05
done`

// newMarker returns a fresh markerEnv=value line, as it appears in /proc/*/environ.
func newMarker() string { return markerEnv + "=" + rand.Text() }

type spawned struct {
	sp  spawnResult
	err error
}

// spawnOwned sends a spawn whose process the provider owns (an exec, or one of its own scripts). If
// ctx ends before the answer, the process may be running all the same: the answer is still awaited
// (bounded) in the background, its output streams are claimed and dropped (unclaimed, they would be
// held in memory for the socket's life), and what it started is killed by pid and, when marker is not
// empty, by marker.
func (p *Provider) spawnOwned(ctx context.Context, lv *live, params map[string]any, pump func(), marker string) (spawnResult, error) {
	got := make(chan spawned, 1)
	go func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.RequestTimeout)
		defer cancel()
		var sp spawnResult
		err := lv.conn.call(bg, "spawn", params, &sp, pump)
		got <- spawned{sp, err}
	}()
	select {
	case r := <-got:
		return r.sp, r.err
	case <-ctx.Done():
		p.cleanups.Go(func() { p.abandonSpawn(context.WithoutCancel(ctx), lv, got, marker) })
		return spawnResult{}, ctx.Err()
	}
}

// abandonSpawn cleans up after a spawn whose caller left: see spawnOwned.
func (p *Provider) abandonSpawn(ctx context.Context, lv *live, got <-chan spawned, marker string) {
	r := <-got
	if r.err != nil {
		if !errors.Is(r.err, errConnLost) { // no answer in time: the process may exist all the same
			p.killExec(ctx, lv, 0, marker)
		}
		return
	}
	for _, id := range []*int{r.sp.StdoutID, r.sp.StderrID} {
		if id != nil {
			lv.conn.claim(*id, io.Discard)
		}
	}
	p.killExec(ctx, lv, r.sp.PID, marker)
}

// killExec kills the command (processKill) and everything it started (the marker), bounded. An empty
// marker kills by pid alone: that is the kill tree's own cleanup, which must not start another kill
// tree (under a socket that never answers, that would go on for as long as the socket stays open);
// the kill tree ends by itself within seconds.
func (p *Provider) killExec(ctx context.Context, lv *live, pid int, marker string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if pid > 0 { // 0: the pid is unknown (the spawn never answered); the marker still finds it
		if err := lv.conn.call(ctx, "processKill", map[string]any{"pid": pid, "signal": "SIGKILL"}, nil, nil); err != nil {
			p.log.Debug("processKill", zap.Error(err))
		}
	}
	if marker == "" {
		return
	}
	var out strings.Builder
	w := sandbox.NewCappedWriter(&out, 64<<10)
	if code, err := p.script(ctx, lv, w, w, "", killTree, marker); err != nil || code != 0 {
		p.log.Warn("kill an exec's processes", zap.String("box", lv.id), zap.Int("exit", code), zap.Error(err))
	}
}

type runResult struct {
	code int
	out  string
}

// run runs one of the provider's own scripts (sh -c script sh args…) and returns its exit code and
// stdout+stderr (bounded).
func (p *Provider) run(ctx context.Context, lv *live, script string, args ...string) (runResult, error) {
	var out strings.Builder
	w := sandbox.NewCappedWriter(&out, 1<<20)
	code, err := p.script(ctx, lv, w, w, newMarker(), script, args...)
	if err != nil {
		return runResult{}, err
	}
	return runResult{code: code, out: out.String()}, nil
}

// runOut is run with stdout alone, for scripts whose output is data.
func (p *Provider) runOut(ctx context.Context, lv *live, max int64, script string, args ...string) (string, string, int, error) {
	var out, errb strings.Builder
	ow := sandbox.NewCappedWriter(&out, max)
	ew := sandbox.NewCappedWriter(&errb, 64<<10)
	code, err := p.script(ctx, lv, ow, ew, newMarker(), script, args...)
	if err != nil {
		return "", "", 0, err
	}
	if ow.Truncated() {
		return "", "", 0, fmt.Errorf("deno: script output: more than %d bytes: %w", max, sandbox.ErrTooLarge)
	}
	return out.String(), errb.String(), code, nil
}

// script runs sh -c script sh args… with its output to stdout and stderr (bounded writers) and
// returns its exit code. Its spawn is owned (spawnOwned): the script carries marker in its
// environment (none: killed by pid alone, see killExec), so a caller leaving mid-spawn leaves
// nothing running or held.
func (p *Provider) script(ctx context.Context, lv *live, stdout, stderr io.Writer, marker, script string, args ...string) (int, error) {
	params := map[string]any{"command": "sh", "args": append([]string{"-c", script, "sh"}, args...), "stdout": "piped", "stderr": "piped"}
	if marker != "" {
		params["env"] = map[string]string{markerEnv: strings.TrimPrefix(marker, markerEnv+"=")}
	}
	sp, err := p.spawnOwned(ctx, lv, params, nil, marker)
	if err != nil {
		return 0, err
	}
	var streams []*inStream
	if sp.StdoutID != nil {
		streams = append(streams, lv.conn.claim(*sp.StdoutID, stdout))
	}
	if sp.StderrID != nil {
		streams = append(streams, lv.conn.claim(*sp.StderrID, stderr))
	}
	var wr waitResult
	if err := lv.conn.call(ctx, "processWait", map[string]int{"pid": sp.PID}, &wr, nil); err != nil {
		if ctx.Err() != nil {
			// The caller left while the script ran: nothing of it runs on in the box (as for an Exec).
			p.killExec(context.WithoutCancel(ctx), lv, sp.PID, marker)
		}
		return 0, err
	}
	for _, s := range streams {
		select {
		case <-s.done:
		case <-ctx.Done():
			// Exited, but something it started holds its output open.
			p.killExec(context.WithoutCancel(ctx), lv, 0, marker)
			return 0, ctx.Err()
		}
	}
	return wr.Code, nil
}
