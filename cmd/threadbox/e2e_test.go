package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// server is a real threadbox serve process.
type server struct {
	cmd  *exec.Cmd
	url  string
	done chan error

	// mu protects the following: the process's log so far, and a channel closed at each new line.
	mu      sync.Mutex
	log     strings.Builder
	newLine chan struct{}
}

// waitLog waits up to d for a log line containing text and reports whether one came.
func (s *server) waitLog(text string, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		found, ch := strings.Contains(s.log.String(), text), s.newLine
		s.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// logText is the process's log so far.
func (s *server) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

var listenRE = regexp.MustCompile(`"url": "(http://[^"]+)"`)

func startServer(t *testing.T, bin string, env []string) *server {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	s := startCmd(t, cmd, 2*time.Minute)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return s
}

// startCmd starts cmd, a threadbox serve in some wrapping, and waits up to wait until it listens.
func startCmd(t *testing.T, cmd *exec.Cmd, wait time.Duration) *server {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, done: make(chan error, 1), newLine: make(chan struct{})}
	urls := make(chan string, 1)
	// THREADBOX_E2E_LOGDIR keeps every server's log, for a post-mortem of a long e2e run.
	var keep io.Writer = io.Discard
	if dir := os.Getenv("THREADBOX_E2E_LOGDIR"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("serve-%d.log", cmd.Process.Pid)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		keep = f
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			_, _ = io.WriteString(keep, sc.Text()+"\n")
			close(s.newLine)
			s.newLine = make(chan struct{})
			s.mu.Unlock()
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		s.done <- cmd.Wait()
	}()
	select {
	case s.url = <-urls:
	case err := <-s.done:
		t.Fatalf("serve exited before listening: %v\n%s", err, s.logText())
	case <-time.After(wait):
		t.Fatalf("serve did not start listening\n%s", s.logText())
	}
	return s
}

func (s *server) post(t *testing.T, path string, body any) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(s.url+path, "application/json", bytes.NewReader(raw))
	require.NoError(t, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	require.Less(t, resp.StatusCode, 300, "%s: %s", path, data)
	var out map[string]any
	require.NoError(t, json.Unmarshal(data, &out))
	return out
}

// events follows a conversation's SSE stream.
type events struct {
	sc   *bufio.Scanner
	body io.Closer
}

func (s *server) events(t *testing.T, conv string) *events {
	t.Helper()
	resp, err := http.Get(s.url + "/api/conversations/" + conv + "/events")
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return &events{sc: bufio.NewScanner(resp.Body), body: resp.Body}
}

// until reads events until one of type typ contains text, and returns its text.
func (e *events) until(t *testing.T, typ, text string) string {
	t.Helper()
	for e.sc.Scan() {
		line, ok := strings.CutPrefix(e.sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct{ Type, Text string }
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		if ev.Type == typ && strings.Contains(ev.Text, text) {
			return ev.Text
		}
	}
	t.Fatalf("event stream ended before a %s containing %q: %v", typ, text, e.sc.Err())
	return ""
}

// TestSIGTERMDuringTurnKeepsTheSandbox runs the real binary on Docker: SIGTERM while a turn runs makes
// it exit cleanly, the sandbox survives, and after a restart the conversation continues in it.
func TestSIGTERMDuringTurnKeepsTheSandbox(t *testing.T) {
	prov := dockertest.New(t, docker.Options{})
	dep := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	destroyDeployment(t, prov, dep)
	dir := t.TempDir()
	bin := filepath.Join(dir, "threadbox")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	dbPath := filepath.Join(dir, "tb.db")
	env := append(os.Environ(),
		"THREADBOX_DATABASE_URL=sqlite:"+dbPath,
		"THREADBOX_HTTP_ADDR=127.0.0.1:0", "THREADBOX_HTTP_TRUST_LOOPBACK=true",
		"THREADBOX_DEPLOYMENT="+dep,
		"THREADBOX_SANDBOX_PROVIDER=docker",
		"THREADBOX_SANDBOX_IMAGE="+dockertest.Image(),
		"THREADBOX_LIFECYCLE_SHUTDOWN_GRACE=1s",
	)

	s := startServer(t, bin, env)
	conv := s.post(t, "/api/conversations", map[string]any{})["id"].(string)
	ev := s.events(t, conv)
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "echo kept > f.txt && echo first"})
	ev.until(t, "post", "first")
	s.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "echo started; sleep 300"})
	ev.until(t, "progress", "started")

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-s.done:
		require.NoError(t, err, "a clean exit on SIGTERM")
	case <-time.After(time.Minute):
		t.Fatal("serve did not exit after SIGTERM")
	}

	st, err := db.Open(t.Context(), "sqlite:"+dbPath)
	require.NoError(t, err)
	sess, err := st.SessionGet(t.Context(), "web:"+conv)
	require.NoError(t, err)
	require.NoError(t, st.Close(), "the database lock was released on exit")
	var h sandbox.Handle
	require.NoError(t, json.Unmarshal(sess.Handle, &h))
	info, err := prov.Inspect(t.Context(), h)
	require.NoError(t, err, "the sandbox survived the shutdown")
	require.Equal(t, sandbox.StateRunning, info.State)

	s2 := startServer(t, bin, env)
	ev2 := s2.events(t, conv)
	s2.post(t, "/api/conversations/"+conv+"/messages", map[string]any{"text": "cat f.txt"})
	require.Equal(t, "kept", ev2.until(t, "post", "kept"), "the conversation continues in the same sandbox")
	require.NoError(t, s2.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-s2.done)

	st, err = db.Open(t.Context(), "sqlite:"+dbPath)
	require.NoError(t, err)
	defer st.Close()
	after, err := st.SessionGet(t.Context(), "web:"+conv)
	require.NoError(t, err)
	require.Equal(t, sess.SandboxID, after.SandboxID)
	require.Equal(t, int64(1), after.Generation)
}

// destroyDeployment destroys, when the test ends, every sandbox of deployment dep, and the volumes
// left by sandboxes removed behind the bot's back (docker rm -f keeps a container's named volume).
func destroyDeployment(t *testing.T, prov sandbox.Provider, dep string) {
	t.Cleanup(func() {
		labels := map[string]string{sandbox.LabelDeployment: dep}
		list, _ := prov.List(context.Background(), labels)
		for _, i := range list {
			_ = prov.Destroy(context.Background(), i.Handle)
		}
		if vr, ok := prov.(sandbox.VolumeReaper); ok {
			vols, _ := vr.ListVolumes(context.Background(), labels)
			for _, v := range vols {
				_ = vr.RemoveVolume(context.Background(), v.Name)
			}
		}
	})
}
