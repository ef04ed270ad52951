package denofake

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

type method func(ctx context.Context, c *conn, raw json.RawMessage) (any, error)

var methods = map[string]method{
	"spawn":       spawn,
	"processWait": processWait,
	"processKill": processKill,
	"readFile":    readFile,
	"writeFile":   writeFile,
	"stat":        func(ctx context.Context, c *conn, raw json.RawMessage) (any, error) { return stat(ctx, c, raw, true) },
	"lstat":       func(ctx context.Context, c *conn, raw json.RawMessage) (any, error) { return stat(ctx, c, raw, false) },
	"readDir":     readDir,
	"mkdir":       mkdir,
	"remove":      remove,
	"envSet":      envSet,
	"envGet":      envGet,
	"envDelete":   envDelete,
	"envToObject": envToObject,
	"exposeHttp":  exposeHTTPRPC,
	"abort":       func(context.Context, *conn, json.RawMessage) (any, error) { return nil, nil },
}

// proc is one spawned process.
type proc struct {
	done   chan struct{}
	code   int
	signal string
}

var signals = map[string]int{"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGKILL": 9, "SIGUSR1": 10, "SIGUSR2": 12, "SIGTERM": 15, "SIGSTOP": 19, "SIGCONT": 18}

func signalName(n int) string {
	for k, v := range signals {
		if v == n {
			return k
		}
	}
	return "SIG" + strconv.Itoa(n)
}

// running checks that the sandbox is still up and returns its backend handle and env.
func (c *conn) running() (sandbox.Handle, map[string]string, context.Context, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.b.status != "running" || c.b.backend.IsZero() {
		return sandbox.Handle{}, nil, nil, newErrObj("Error", "", "sandbox is stopped")
	}
	return c.b.backend, maps.Clone(c.b.env), c.b.procCtx, nil
}

func spawn(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Command       string            `json:"command"`
		Args          []string          `json:"args,omitempty"`
		Env           map[string]string `json:"env,omitempty"`
		ClearEnv      bool              `json:"clearEnv,omitempty"`
		Cwd           string            `json:"cwd,omitempty"`
		StdinStreamID *int              `json:"stdinStreamId,omitempty"`
		Stdout        string            `json:"stdout"`
		Stderr        string            `json:"stderr"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	for _, s := range []string{p.Stdout, p.Stderr} {
		if s != "piped" && s != "null" {
			return nil, &paramsError{fmt.Errorf("stdout/stderr must be \"piped\" or \"null\", got %q", s)}
		}
	}
	if p.Command == "" {
		return nil, &paramsError{fmt.Errorf("command is required")}
	}
	stdin, err := c.inboundStream(p.StdinStreamID)
	if err != nil {
		return nil, err
	}
	h, env, procCtx, err := c.running()
	if err != nil {
		return nil, err
	}
	if p.ClearEnv {
		env = map[string]string{}
	}
	maps.Copy(env, p.Env)
	c.f.mu.Lock()
	c.b.pidSeq++
	pid := c.b.pidSeq + 100
	pr := &proc{done: make(chan struct{})}
	c.b.procs[pid] = pr
	c.f.mu.Unlock()

	res := map[string]any{"pid": pid, "stdoutStreamId": nil, "stderrStreamId": nil}
	var stdout, stderr io.Writer
	var outs []*outStream
	if p.Stdout == "piped" {
		s := c.newOut()
		stdout, res["stdoutStreamId"] = s, s.id
		outs = append(outs, s)
	}
	if p.Stderr == "piped" {
		s := c.newOut()
		stderr, res["stderrStreamId"] = s, s.id
		outs = append(outs, s)
	}
	req := sandbox.ExecRequest{
		// The wrapper records the pid processKill signals, then becomes the command.
		Cmd: append([]string{"sh", "-c", `echo $$ > /tmp/.denofake-` + strconv.Itoa(pid) + `.pid; exec "$@"`, "sh", p.Command}, p.Args...),
		Dir: p.Cwd, Env: env, Stdout: stdout, Stderr: stderr, MaxOutput: 1 << 40,
	}
	if stdin != nil {
		req.Stdin = stdin
	}
	c.f.goBackground(func(context.Context) {
		r, err := c.f.opts.Backend.Exec(procCtx, h, req)
		code := r.ExitCode
		if err != nil {
			code = 137 // the sandbox went away under it
		}
		for _, s := range outs {
			s.end()
		}
		c.f.mu.Lock()
		pr.code = code
		if code > 128 && code < 160 {
			pr.signal = signalName(code - 128)
		}
		c.f.mu.Unlock()
		close(pr.done)
	})
	return res, nil
}

func (c *conn) proc(pid int) (*proc, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	pr := c.b.procs[pid]
	if pr == nil {
		return nil, newErrObj("NotFound", "ESRCH", fmt.Sprintf("no process with pid %d", pid))
	}
	return pr, nil
}

func processWait(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		PID int `json:"pid"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	pr, err := c.proc(p.PID)
	if err != nil {
		return nil, err
	}
	select {
	case <-pr.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	var sig any
	if pr.signal != "" {
		sig = pr.signal
	}
	return map[string]any{"success": pr.code == 0, "code": pr.code, "signal": sig, "oom": nil}, nil
}

func processKill(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		PID    int    `json:"pid"`
		Signal string `json:"signal,omitempty"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	if p.Signal == "" {
		p.Signal = "SIGTERM"
	}
	if _, ok := signals[p.Signal]; !ok {
		return nil, newErrObj("TypeError", "", fmt.Sprintf("unknown signal %q", p.Signal))
	}
	pr, err := c.proc(p.PID)
	if err != nil {
		return nil, err
	}
	select {
	case <-pr.done:
		return nil, nil
	default:
	}
	// The wrapper may not have written its pid yet: wait for it (bounded).
	script := `f=/tmp/.denofake-$1.pid; i=0
while [ ! -s "$f" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
kill -s "${2#SIG}" "$(cat "$f")" 2>/dev/null; exit 0`
	_, _, _, err = c.script(ctx, script, nil, strconv.Itoa(p.PID), p.Signal)
	return nil, err
}

// script runs a shell script in the sandbox for a filesystem method; it returns stdout, stderr and
// the exit code.
func (c *conn) script(ctx context.Context, script string, stdin io.Reader, args ...string) ([]byte, string, int, error) {
	h, _, _, err := c.running()
	if err != nil {
		return nil, "", 0, err
	}
	var out, errb bytes.Buffer
	r, err := c.f.opts.Backend.Exec(ctx, h, sandbox.ExecRequest{Cmd: append([]string{"sh", "-c", script, "sh"}, args...),
		Stdin: stdin, Stdout: &out, Stderr: &errb, MaxOutput: 1 << 40})
	if err != nil {
		return nil, "", 0, newErrObj("Error", "", err.Error())
	}
	return out.Bytes(), errb.String(), r.ExitCode, nil
}

// fsErr maps a script's exit code to Deno's error for path.
func fsErr(code int, path, stderr string) error {
	switch code {
	case 0:
		return nil
	case 2:
		return newErrObj("NotFound", "ENOENT", fmt.Sprintf("No such file or directory (os error 2): '%s'", path))
	case 13:
		return newErrObj("PermissionDenied", "EACCES", fmt.Sprintf("Permission denied (os error 13): '%s'", path))
	case 17:
		return newErrObj("AlreadyExists", "EEXIST", fmt.Sprintf("File exists (os error 17): '%s'", path))
	case 20:
		return newErrObj("NotADirectory", "ENOTDIR", fmt.Sprintf("Not a directory (os error 20): '%s'", path))
	case 21:
		return newErrObj("IsADirectory", "EISDIR", fmt.Sprintf("Is a directory (os error 21): '%s'", path))
	case 39:
		return newErrObj("Error", "ENOTEMPTY", fmt.Sprintf("Directory not empty (os error 39): '%s'", path))
	}
	return newErrObj("Error", "", fmt.Sprintf("%s: exit %d: %s", path, code, strings.TrimSpace(stderr)))
}

const pathChecks = `p=$1
if [ ! -e "$p" ] && [ ! -L "$p" ]; then d=$(dirname "$p"); [ -e "$d" ] && [ ! -d "$d" ] && exit 20; fi
`

func readFile(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Path    string `json:"path"`
		AbortID *int   `json:"abortId,omitempty"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	out, stderr, code, err := c.script(ctx, pathChecks+`[ -e "$p" ] || exit 2; [ -d "$p" ] && exit 21; [ -r "$p" ] || exit 13; exec cat -- "$p"`, nil, p.Path)
	if err != nil {
		return nil, err
	}
	if err := fsErr(code, p.Path, stderr); err != nil {
		return nil, err
	}
	return base64.StdEncoding.EncodeToString(out), nil
}

func writeFile(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Path    string `json:"path"`
		AbortID *int   `json:"abortId,omitempty"`
		Options *struct {
			Append    bool  `json:"append,omitempty"`
			Create    *bool `json:"create,omitempty"`
			CreateNew bool  `json:"createNew,omitempty"`
			Mode      *int  `json:"mode,omitempty"`
		} `json:"options,omitempty"`
		Content         *string `json:"content,omitempty"`
		ContentStreamID *int    `json:"contentStreamId,omitempty"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	if (p.Content == nil) == (p.ContentStreamID == nil) {
		return nil, &paramsError{fmt.Errorf("exactly one of content and contentStreamId")}
	}
	var body io.Reader
	if p.Content != nil {
		data, err := base64.StdEncoding.DecodeString(*p.Content)
		if err != nil {
			return nil, &paramsError{fmt.Errorf("content: %w", err)}
		}
		body = bytes.NewReader(data)
	} else {
		s, err := c.inboundStream(p.ContentStreamID)
		if err != nil {
			return nil, err
		}
		body = s
	}
	create, appendTo, createNew, mode := "1", "", "", ""
	if o := p.Options; o != nil {
		if o.Create != nil && !*o.Create {
			create = ""
		}
		if o.Append {
			appendTo = "1"
		}
		if o.CreateNew {
			createNew = "1"
		}
		if o.Mode != nil {
			mode = strconv.FormatInt(int64(*o.Mode), 8)
		}
	}
	script := pathChecks + `[ -d "$(dirname "$p")" ] || exit 2; [ -d "$p" ] && exit 21
new=; [ -e "$p" ] || new=1
[ -n "$4" ] && [ -z "$new" ] && exit 17
[ -z "$2" ] && [ -n "$new" ] && exit 2
if [ -n "$3" ]; then cat >> "$p" || exit 13; else cat > "$p" || exit 13; fi
[ -n "$new" ] && [ -n "$5" ] && chmod "$5" "$p"; exit 0`
	_, stderr, code, err := c.script(ctx, script, body, p.Path, create, appendTo, createNew, mode)
	if err != nil {
		return nil, err
	}
	return nil, fsErr(code, p.Path, stderr)
}

func stat(ctx context.Context, c *conn, raw json.RawMessage, follow bool) (any, error) {
	var p struct {
		Path string `json:"path"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	flag := ""
	if follow {
		flag = "-L"
	}
	out, stderr, code, err := c.script(ctx, pathChecks+`[ -e "$p" ] || [ -L "$p" ] || exit 2
exec stat `+flag+` -c '%f %s %Y %X %Z %d %i %h %u %g %B %b' -- "$p"`, nil, p.Path)
	if err != nil {
		return nil, err
	}
	if err := fsErr(code, p.Path, stderr); err != nil {
		return nil, err
	}
	f := strings.Fields(string(out))
	if len(f) != 12 {
		return nil, newErrObj("Error", "", "stat: unexpected output "+string(out))
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	raw16, _ := strconv.ParseInt(f[0], 16, 64)
	typ := raw16 & 0o170000
	date := func(i int) string { return time.Unix(n(i), 0).UTC().Format(time.RFC3339Nano) }
	return map[string]any{
		"isFile": typ == 0o100000, "isDirectory": typ == 0o040000, "isSymlink": typ == 0o120000,
		"size": n(1), "mtime": date(2), "atime": date(3), "birthtime": nil, "ctime": date(4),
		"mode": raw16, "dev": n(5), "ino": n(6), "nlink": n(7), "uid": n(8), "gid": n(9), "rdev": 0,
		"blksize": n(10), "blocks": n(11), "isBlockDevice": typ == 0o060000, "isCharDevice": typ == 0o020000,
		"isFifo": typ == 0o010000, "isSocket": typ == 0o140000,
	}, nil
}

func readDir(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Path string `json:"path"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	// Three NUL-separated groups (files, directories, symlinks), each ended by "/" and a NUL, which no
	// entry ("./name") can be.
	out, stderr, code, err := c.script(ctx, pathChecks+`[ -e "$p" ] || exit 2; [ -d "$p" ] || exit 20; cd "$p" || exit 13
for t in f d l; do find . -mindepth 1 -maxdepth 1 -type $t -print0; printf '/\0'; done`, nil, p.Path)
	if err != nil {
		return nil, err
	}
	if err := fsErr(code, p.Path, stderr); err != nil {
		return nil, err
	}
	entries := []map[string]any{}
	group := 0
	for _, name := range strings.Split(string(out), "\x00") {
		switch {
		case name == "/":
			group++
		case strings.HasPrefix(name, "./"):
			entries = append(entries, map[string]any{"name": name[2:], "isFile": group == 0, "isDirectory": group == 1, "isSymlink": group == 2})
		}
	}
	return entries, nil
}

func mkdir(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Path    string `json:"path"`
		Options *struct {
			Recursive bool `json:"recursive,omitempty"`
			Mode      *int `json:"mode,omitempty"`
		} `json:"options,omitempty"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	rec, mode := "", "755"
	if p.Options != nil {
		if p.Options.Recursive {
			rec = "1"
		}
		if p.Options.Mode != nil {
			mode = strconv.FormatInt(int64(*p.Options.Mode), 8)
		}
	}
	_, stderr, code, err := c.script(ctx, pathChecks+`if [ -n "$2" ]; then [ -d "$p" ] && exit 0; [ -e "$p" ] && exit 17; mkdir -p -m "$3" -- "$p" || exit 13
else [ -e "$p" ] && exit 17; [ -d "$(dirname "$p")" ] || exit 2; mkdir -m "$3" -- "$p" || exit 13; fi`, nil, p.Path, rec, mode)
	if err != nil {
		return nil, err
	}
	return nil, fsErr(code, p.Path, stderr)
}

func remove(ctx context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Path    string `json:"path"`
		Options *struct {
			Recursive bool `json:"recursive,omitempty"`
		} `json:"options,omitempty"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	rec := ""
	if p.Options != nil && p.Options.Recursive {
		rec = "1"
	}
	_, stderr, code, err := c.script(ctx, pathChecks+`[ -e "$p" ] || [ -L "$p" ] || exit 2
if [ -d "$p" ] && [ ! -L "$p" ]; then
  if [ -n "$2" ]; then rm -rf -- "$p" || exit 13; else [ -z "$(ls -A "$p")" ] || exit 39; rmdir -- "$p" || exit 13; fi
else rm -f -- "$p" || exit 13; fi`, nil, p.Path, rec)
	if err != nil {
		return nil, err
	}
	return nil, fsErr(code, p.Path, stderr)
}

func envSet(_ context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	if err := sandbox.ValidateEnvName(p.Key); err != nil {
		return nil, newErrObj("TypeError", "", err.Error())
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.b.env[p.Key] = p.Value
	return nil, nil
}

func envGet(_ context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Key string `json:"key"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if v, ok := c.b.env[p.Key]; ok {
		return v, nil
	}
	return nil, nil
}

func envDelete(_ context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Key string `json:"key"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	delete(c.b.env, p.Key)
	return nil, nil
}

func envToObject(_ context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct{}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return maps.Clone(c.b.env), nil
}

func exposeHTTPRPC(_ context.Context, c *conn, raw json.RawMessage) (any, error) {
	var p struct {
		Domain string `json:"domain"`
		Port   *int   `json:"port,omitempty"`
		PID    *int   `json:"pid,omitempty"`
	}
	if err := params(raw, &p); err != nil {
		return nil, err
	}
	if (p.Port == nil) == (p.PID == nil) {
		return nil, &paramsError{fmt.Errorf("exactly one of port and pid")}
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if !c.b.domains[p.Domain] {
		// Step 1 (the REST expose) must come first: the domain is the one it returned.
		return nil, newErrObj("NotFound", "", fmt.Sprintf("domain %q was not issued for this sandbox", p.Domain))
	}
	return nil, nil
}
