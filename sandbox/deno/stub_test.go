package deno

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/sandbox"
)

// rpcReq is one JSON-RPC request the stub received.
type rpcReq struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// stubSock is the sandbox end of one socket, driven by the test: it answers what the test tells it.
type stubSock struct {
	t    *testing.T
	ws   *websocket.Conn
	reqs chan rpcReq
}

func (s *stubSock) send(v any) {
	data, err := json.Marshal(v)
	require.NoError(s.t, err)
	require.NoError(s.t, s.ws.WriteMessage(websocket.TextMessage, data))
}

func (s *stubSock) answer(id int64, ok any) {
	s.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"ok": ok}})
}

func (s *stubSock) note(method string, params any) {
	s.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// next returns the next request other than a stream notification, failing after a generous bound.
func (s *stubSock) next() rpcReq {
	s.t.Helper()
	select {
	case r := <-s.reqs:
		return r
	case <-time.After(10 * time.Second):
		s.t.Fatal("no request from the provider")
		return rpcReq{}
	}
}

// stubProvider is a Provider holding one box whose socket goes to a stub the test drives.
func stubProvider(t *testing.T) (*Provider, sandbox.Handle, *stubSock) {
	t.Helper()
	socks := make(chan *stubSock, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, http.Header{"X-Deno-Sandbox-Id": {"sbx_stub"}})
		if err != nil {
			return
		}
		s := &stubSock{t: t, ws: ws, reqs: make(chan rpcReq, 16)}
		socks <- s
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var q rpcReq
			if string(data) == "ping" || json.Unmarshal(data, &q) != nil || strings.HasPrefix(q.Method, "$") {
				continue
			}
			s.reqs <- q
		}
	}))
	t.Cleanup(srv.Close)
	p, err := New(Options{Token: "ddo_stub", SandboxURL: srv.URL, ConsoleURL: srv.URL, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	conn, err := p.dialRPC(t.Context(), "connect", "ws"+strings.TrimPrefix(srv.URL, "http"), http.Header{})
	require.NoError(t, err)
	h := sandbox.Handle{Provider: Name, ID: newBoxID("stub", time.Now()), Version: handleVersion}
	p.remember(h.ID, "ord", conn, time.Now().Add(time.Hour))
	return p, h, <-socks
}

func envOf(t *testing.T, q rpcReq) (map[string]string, []string) {
	var sp struct {
		Env  map[string]string `json:"env"`
		Args []string          `json:"args"`
	}
	require.NoError(t, json.Unmarshal(q.Params, &sp))
	return sp.Env, sp.Args
}

// TestExecCancelledDuringSpawnKills: a ctx cancelled while spawn is in flight still kills what the
// spawn started (processKill and the marker's kill tree) and claims its output streams, so nothing is
// left running or held.
func TestExecCancelledDuringSpawnKills(t *testing.T) {
	p, h, s := stubProvider(t)
	ctx, cancel := context.WithCancel(t.Context())
	execErr := make(chan error, 1)
	go func() {
		_, err := p.Exec(ctx, h, sandbox.ExecRequest{Cmd: []string{"sleep", "600"}})
		execErr <- err
	}()
	spawn := s.next()
	require.Equal(t, "spawn", spawn.Method)
	env, _ := envOf(t, spawn)
	marker := markerEnv + "=" + env[markerEnv]
	cancel()
	require.ErrorIs(t, <-execErr, context.Canceled)

	// The spawn answer comes after the caller gave up, with output already in flight.
	expectLateSpawnKilled(t, p, s, p.lives[h.ID], spawn, marker)
}

// expectLateSpawnKilled answers spawn (whose caller has left) with output already in flight, and
// requires what a left-behind spawn gets: its process killed by pid, then by a kill tree that looks
// for marker, and its output streams claimed and released.
func expectLateSpawnKilled(t *testing.T, p *Provider, s *stubSock, lv *live, spawn rpcReq, marker string) {
	t.Helper()
	for _, id := range []int{1, 2} {
		s.note("$sandbox.stream.enqueue", map[string]any{"streamId": id, "data": base64.StdEncoding.EncodeToString([]byte("out"))})
	}
	s.answer(spawn.ID, map[string]any{"pid": 7, "stdoutStreamId": 1, "stderrStreamId": 2})

	kill := s.next()
	require.Equal(t, "processKill", kill.Method, "the spawned process is killed")
	require.JSONEq(t, `{"pid":7,"signal":"SIGKILL"}`, string(kill.Params))
	for _, id := range []int{1, 2} {
		s.note("$sandbox.stream.end", map[string]any{"streamId": id})
	}
	s.answer(kill.ID, nil)
	tree := s.next()
	require.Equal(t, "spawn", tree.Method)
	_, args := envOf(t, tree)
	require.Equal(t, marker, args[len(args)-1], "the kill tree looks for the spawn's marker")
	s.answer(tree.ID, map[string]any{"pid": 8})
	wait := s.next()
	require.Equal(t, "processWait", wait.Method)
	s.answer(wait.ID, map[string]any{"success": true, "code": 0})

	require.Eventually(t, func() bool {
		lv.conn.mu.Lock()
		defer lv.conn.mu.Unlock()
		return len(lv.conn.streams) == 0
	}, 10*time.Second, 5*time.Millisecond, "the spawn's output streams are claimed and released")
	p.cleanups.Wait() // the clean-up has ended (it logs): nothing of it outlives the test
}

// TestReadFileGrownPastMax: a file that grows past max between the size check and the read gives
// ErrFileTooLarge, and the read is bounded: it never asks for the whole file in one message (past
// the socket's read limit, that message closes the box's shared socket).
func TestReadFileGrownPastMax(t *testing.T) {
	p, h, s := stubProvider(t)
	const max = 10
	got := make(chan error, 1)
	go func() {
		_, err := p.ReadFile(t.Context(), h, "grows.log", max)
		got <- err
	}()
	var err error
	for pid := 101; ; pid++ {
		var q rpcReq
		select {
		case err = <-got:
		case q = <-s.reqs:
		}
		if q.Method == "" {
			break
		}
		if q.Method == "readFile" {
			_ = s.ws.Close() // what an answer past maxRPCMessage does
			continue
		}
		require.Equal(t, "spawn", q.Method)
		s.answer(q.ID, map[string]any{"pid": pid, "stdoutStreamId": 2 * pid, "stderrStreamId": 2*pid + 1})
		// The file has grown to twice max since its size was checked: whatever reads it sees more.
		s.note("$sandbox.stream.enqueue", map[string]any{"streamId": 2 * pid, "data": base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 2*max)))})
		s.note("$sandbox.stream.end", map[string]any{"streamId": 2 * pid})
		s.note("$sandbox.stream.end", map[string]any{"streamId": 2*pid + 1})
		w := s.next()
		require.Equal(t, "processWait", w.Method)
		s.answer(w.ID, map[string]any{"success": true, "code": 0})
	}
	require.ErrorIs(t, err, sandbox.ErrFileTooLarge)
	require.False(t, p.lives[h.ID].conn.closed(), "the box's socket stays open")
}

// TestScriptCancelledDuringSpawnKills: the provider's own scripts (run, runOut: the file operations,
// the kill tree) get the exec's treatment when ctx ends while their spawn is in flight: they carry a
// marker, the answer is still awaited, the script is killed by pid and by marker, and its output
// streams are claimed and released rather than held for the socket's life.
func TestScriptCancelledDuringSpawnKills(t *testing.T) {
	for name, run := range scriptRuns {
		t.Run(name, func(t *testing.T) {
			p, h, s := stubProvider(t)
			lv := p.lives[h.ID]
			ctx, cancel := context.WithCancel(t.Context())
			runErr := make(chan error, 1)
			go func() { runErr <- run(ctx, p, lv) }()
			spawn := s.next()
			require.Equal(t, "spawn", spawn.Method)
			env, _ := envOf(t, spawn)
			require.NotEmpty(t, env[markerEnv], "the script carries a marker")
			marker := markerEnv + "=" + env[markerEnv]
			cancel()
			require.ErrorIs(t, <-runErr, context.Canceled)

			expectLateSpawnKilled(t, p, s, lv, spawn, marker)
		})
	}
}

// scriptRuns are the two ways the provider runs its own scripts, each running sleep 600.
var scriptRuns = map[string]func(context.Context, *Provider, *live) error{
	"run": func(ctx context.Context, p *Provider, lv *live) error {
		_, err := p.run(ctx, lv, "sleep 600")
		return err
	},
	"runOut": func(ctx context.Context, p *Provider, lv *live) error {
		_, _, _, err := p.runOut(ctx, lv, 1<<10, "sleep 600")
		return err
	},
}

// TestScriptCancelledWhileRunningKills: one of the provider's own scripts whose caller leaves while
// it runs (after its spawn answered) is killed, with everything it started, as an Exec is: it used to
// run on in the box, holding its output streams, for as long as it liked.
func TestScriptCancelledWhileRunningKills(t *testing.T) {
	for name, run := range scriptRuns {
		t.Run(name, func(t *testing.T) {
			p, h, s := stubProvider(t)
			lv := p.lives[h.ID]
			ctx, cancel := context.WithCancel(t.Context())
			runErr := make(chan error, 1)
			go func() { runErr <- run(ctx, p, lv) }()
			spawn := s.next()
			require.Equal(t, "spawn", spawn.Method)
			env, _ := envOf(t, spawn)
			marker := markerEnv + "=" + env[markerEnv]
			s.answer(spawn.ID, map[string]any{"pid": 7, "stdoutStreamId": 1, "stderrStreamId": 2})
			wait := s.next()
			require.Equal(t, "processWait", wait.Method)
			cancel()

			kill := s.next()
			require.Equal(t, "processKill", kill.Method, "the running script is killed")
			require.JSONEq(t, `{"pid":7,"signal":"SIGKILL"}`, string(kill.Params))
			s.answer(kill.ID, nil)
			s.answer(wait.ID, map[string]any{"success": false, "code": 137})
			for _, id := range []int{1, 2} {
				s.note("$sandbox.stream.end", map[string]any{"streamId": id})
			}
			tree := s.next()
			require.Equal(t, "spawn", tree.Method)
			_, args := envOf(t, tree)
			require.Equal(t, marker, args[len(args)-1], "the kill tree looks for the script's marker")
			s.answer(tree.ID, map[string]any{"pid": 8})
			treeWait := s.next()
			require.Equal(t, "processWait", treeWait.Method)
			s.answer(treeWait.ID, map[string]any{"success": true, "code": 0})
			require.ErrorIs(t, <-runErr, context.Canceled)
		})
	}
}
