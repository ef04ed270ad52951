package daytonafake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/toolbox"
)

// Stream markers of the logs WebSocket (cloud-apis.md §1.7): bytes after one belong to that stream.
var (
	stdoutMarker = []byte{1, 1, 1}
	stderrMarker = []byte{2, 2, 2}
)

// session is a toolbox shell session; each command runs on the backend as sh -c.
type session struct {
	cancel context.CancelFunc // ends the session's commands
	ctx    context.Context
	cmds   map[string]*command
}

// command is one session command and its output.
type command struct {
	id, line string

	mu       sync.Mutex // protects the following
	framed   []byte     // both streams with markers, as the follow WebSocket sends them
	stdout   []byte
	stderr   []byte
	exitCode *int
	changed  chan struct{} // closed and replaced on every change
}

func (c *command) writer(marker []byte, own *[]byte) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.framed = append(append(c.framed, marker...), p...)
		*own = append(*own, p...)
		close(c.changed)
		c.changed = make(chan struct{})
		return len(p), nil
	})
}

func (c *command) finish(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exitCode = &code
	close(c.changed)
	c.changed = make(chan struct{})
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

func (f *Fake) routeToolbox(mux *http.ServeMux) {
	mux.HandleFunc("POST /toolbox/{id}/process/execute", f.execute)
	mux.HandleFunc("POST /toolbox/{id}/process/session", f.createSession)
	mux.HandleFunc("DELETE /toolbox/{id}/process/session/{sid}", f.deleteSession)
	mux.HandleFunc("POST /toolbox/{id}/process/session/{sid}/exec", f.sessionExec)
	mux.HandleFunc("GET /toolbox/{id}/process/session/{sid}/command/{cid}", f.getCommand)
	mux.HandleFunc("GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs", f.commandLogs)
	mux.HandleFunc("POST /toolbox/{id}/files/upload-v2", f.upload)
	mux.HandleFunc("GET /toolbox/{id}/files/download", f.download)
}

// started returns the sandbox for a toolbox request when it runs; otherwise it answers as the proxy
// does (404 for no sandbox, 400 when it is not started) and returns nil.
func (f *Fake) started(w http.ResponseWriter, r *http.Request) *box {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[r.PathValue("id")]
	switch {
	case b == nil:
		f.apiError(w, r, http.StatusNotFound, "sandbox not found")
		return nil
	case b.state != api.SandboxStateStarted:
		f.apiError(w, r, http.StatusBadRequest, fmt.Sprintf("sandbox is %s, not started", b.state))
		return nil
	}
	return b
}

func (f *Fake) execute(w http.ResponseWriter, r *http.Request) {
	b := f.started(w, r)
	if b == nil {
		return
	}
	var req toolbox.ExecuteRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		f.apiError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	var out lockedBuffer
	res, err := f.opts.Backend.Exec(r.Context(), b.backend, sandbox.ExecRequest{
		Cmd: []string{"sh", "-c", req.Command}, Dir: deref(req.Cwd), Env: deref(req.Envs),
		Timeout: time.Duration(deref(req.Timeout)) * time.Second, Stdout: &out, Stderr: &out,
	})
	switch {
	case err != nil:
		f.apiError(w, r, http.StatusInternalServerError, err.Error())
	case res.TimedOut:
		f.apiError(w, r, http.StatusRequestTimeout, "command execution timeout")
	default:
		writeJSON(w, http.StatusOK, toolbox.ExecuteResponse{ExitCode: &res.ExitCode, Result: out.String()})
	}
}

func (f *Fake) createSession(w http.ResponseWriter, r *http.Request) {
	b := f.started(w, r)
	if b == nil {
		return
	}
	var req toolbox.CreateSessionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.apiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.sessions[req.SessionId] != nil {
		f.apiError(w, r, http.StatusConflict, "session already exists")
		return
	}
	ctx, cancel := context.WithCancel(f.ctx)
	b.sessions[req.SessionId] = &session{ctx: ctx, cancel: cancel, cmds: map[string]*command{}}
	w.WriteHeader(http.StatusCreated)
}

// sessionFor returns the session named in r (the caller holds f.mu), or answers 404.
func (f *Fake) sessionFor(w http.ResponseWriter, r *http.Request) (*box, *session) {
	b := f.boxes[r.PathValue("id")]
	if b == nil {
		f.apiError(w, r, http.StatusNotFound, "sandbox not found")
		return nil, nil
	}
	s := b.sessions[r.PathValue("sid")]
	if s == nil {
		f.apiError(w, r, http.StatusNotFound, "session not found")
		return nil, nil
	}
	return b, s
}

func (f *Fake) deleteSession(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	b, s := f.sessionFor(w, r)
	if s != nil {
		delete(b.sessions, r.PathValue("sid"))
	}
	f.mu.Unlock()
	if s != nil {
		s.cancel() // the daemon kills the session's shell
		w.WriteHeader(http.StatusNoContent)
	}
}

func (f *Fake) sessionExec(w http.ResponseWriter, r *http.Request) {
	if f.started(w, r) == nil {
		return
	}
	var req toolbox.SessionExecuteRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		f.apiError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	f.mu.Lock()
	b, s := f.sessionFor(w, r)
	if s == nil {
		f.mu.Unlock()
		return
	}
	c := &command{id: newID(), line: req.Command, changed: make(chan struct{})}
	s.cmds[c.id] = c
	h := b.backend
	f.mu.Unlock()

	run := func(ctx context.Context) {
		// The daemon writes a session's commands to its shell's input, so no process's command line
		// shows them (pgrep -f sees only what the command itself runs), and neither do their
		// arguments (values exported by the command, keys among them).
		res, err := f.opts.Backend.Exec(ctx, h, sandbox.ExecRequest{
			Cmd: []string{"sh"}, Stdin: strings.NewReader(c.line + "\n"),
			Stdout: c.writer(stdoutMarker, &c.stdout), Stderr: c.writer(stderrMarker, &c.stderr),
		})
		if err != nil {
			res.ExitCode = -1
		}
		c.finish(res.ExitCode)
	}
	if deref(req.RunAsync) || deref(req.Async) {
		f.goBackground(func(context.Context) { run(s.ctx) })
		writeJSON(w, http.StatusAccepted, toolbox.SessionExecuteResponse{CmdId: c.id})
		return
	}
	run(s.ctx)
	c.mu.Lock()
	out, stdout, stderr := string(c.stdout)+string(c.stderr), string(c.stdout), string(c.stderr)
	resp := toolbox.SessionExecuteResponse{CmdId: c.id, ExitCode: c.exitCode, Output: &out, Stdout: &stdout, Stderr: &stderr}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (f *Fake) commandFor(w http.ResponseWriter, r *http.Request) *command {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, s := f.sessionFor(w, r)
	if s == nil {
		return nil
	}
	c := s.cmds[r.PathValue("cid")]
	if c == nil {
		f.apiError(w, r, http.StatusNotFound, "command not found")
	}
	return c
}

func (f *Fake) getCommand(w http.ResponseWriter, r *http.Request) {
	c := f.commandFor(w, r)
	if c == nil {
		return
	}
	c.mu.Lock()
	resp := toolbox.Command{Id: c.id, Command: c.line, ExitCode: c.exitCode}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

var upgrader = websocket.Upgrader{}

// commandLogs answers JSON, or with follow=true over a WebSocket streams the framed output until the
// command ends, then closes normally.
func (f *Fake) commandLogs(w http.ResponseWriter, r *http.Request) {
	c := f.commandFor(w, r)
	if c == nil {
		return
	}
	if r.URL.Query().Get("follow") != "true" {
		c.mu.Lock()
		resp := toolbox.SessionCommandLogsResponse{Output: string(c.stdout) + string(c.stderr), Stdout: string(c.stdout), Stderr: string(c.stderr)}
		c.mu.Unlock()
		writeJSON(w, http.StatusOK, resp)
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	defer conn.Close()
	sent := 0
	for {
		c.mu.Lock()
		chunk, done, changed := c.framed[sent:], c.exitCode != nil, c.changed
		c.mu.Unlock()
		if len(chunk) > 0 {
			if err := conn.WriteMessage(websocket.BinaryMessage, chunk); err != nil {
				return
			}
			sent += len(chunk)
			continue
		}
		if done {
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-f.ctx.Done():
			return
		}
	}
}

func (f *Fake) upload(w http.ResponseWriter, r *http.Request) {
	b := f.started(w, r)
	if b == nil {
		return
	}
	file, _, err := r.FormFile("file")
	if err != nil {
		f.apiError(w, r, http.StatusBadRequest, "file is required: "+err.Error())
		return
	}
	defer file.Close()
	data, err := io.ReadAll(file)
	if err != nil {
		f.apiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	p := r.URL.Query().Get("path")
	if err := f.opts.Backend.WriteFile(r.Context(), b.backend, p, data, 0o644); err != nil {
		f.fileError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toolbox.UploadedFile{Name: path.Base(p), Path: p, Type: "file"})
}

func (f *Fake) download(w http.ResponseWriter, r *http.Request) {
	b := f.started(w, r)
	if b == nil {
		return
	}
	data, err := f.opts.Backend.ReadFile(r.Context(), b.backend, r.URL.Query().Get("path"), 1<<30)
	if err != nil {
		f.fileError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(data)
}

func (f *Fake) fileError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.apiError(w, r, http.StatusNotFound, "file not found: "+err.Error())
	case errors.Is(err, sandbox.ErrNotRegular):
		f.apiError(w, r, http.StatusBadRequest, err.Error())
	default:
		f.apiError(w, r, http.StatusInternalServerError, err.Error())
	}
}

// lockedBuffer collects both streams of process/execute (the daemon combines them).
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
