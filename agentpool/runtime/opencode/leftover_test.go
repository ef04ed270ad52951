package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/sandbox"
)

// crashingSandbox is the bot's side of a sandbox as the bot crashes: once crash is called, every
// connection it made is cut and no new one can be made, while the sandbox and its server live on.
type crashingSandbox struct {
	sandbox.Sandbox

	mu      sync.Mutex // protects crashed and conns
	crashed bool
	conns   []net.Conn
}

var errCrashed = errors.New("test: the bot crashed")

func (s *crashingSandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashed {
		return nil, errCrashed
	}
	c, err := s.Sandbox.Dial(ctx, port)
	if err == nil {
		s.conns = append(s.conns, c)
	}
	return c, err
}

func (s *crashingSandbox) crash() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashed = true
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// promptHookSandbox calls onPrompt, once, as the first prompt_async request is about to be written.
type promptHookSandbox struct {
	sandbox.Sandbox
	once     sync.Once
	onPrompt func()
}

func (s *promptHookSandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	c, err := s.Sandbox.Dial(ctx, port)
	if err != nil {
		return nil, err
	}
	return &promptHookConn{Conn: c, s: s}, nil
}

type promptHookConn struct {
	net.Conn
	s *promptHookSandbox
}

func (c *promptHookConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("/prompt_async ")) {
		c.s.once.Do(c.s.onPrompt)
	}
	return c.Conn.Write(p)
}

// TestRunLeftRunningByACrashIsStoppedFirst runs the real opencode server. A turn's run waits in its
// bash tool at a gate when the bot crashes: the turn loses its connections and gives the run up as cut
// (ErrPromptCut), and nobody aborts it (the pool would; a crashed bot does not). The server runs it
// on. The bot that came back (a new runtime) then prompts the same session, the user's "retry": by
// the time its prompt goes out, the old run must be stopped (its tool's process gone; the test opens
// the gate right then, so a run that went on would take it and finish its tool), and the new prompt
// is answered on its own. Before, the server took the new prompt into the old run: the old tool went
// through the gate and the old run went on, the prompt in effect running twice.
func TestRunLeftRunningByACrashIsStoppedFirst(t *testing.T) {
	p := runtimetest.Provider(t)
	sb, _ := runtimetest.NewSandbox(t, p, t.Name())
	const (
		gate   = "/tmp/tb-gate-leftover"
		gateRE = "while \\[ ! -e " + gate + " \\]" // the tool's loop, not the pgrep or the sh running it
	)
	fake := runtimetest.StartFake(t, sb, runtimetest.BuildFake(t), llmfake.Script{Rules: []llmfake.Rule{
		{PromptContains: "TB-LEFTOVER", AfterTool: llmfake.Bool(false), Reply: llmfake.Reply{Tool: &llmfake.ToolCall{Name: "bash",
			Args: json.RawMessage(`{"command":"while [ ! -e ` + gate + ` ]; do sleep 0.05; done; echo open","description":"Wait for the gate"}`)}}},
		{PromptContains: "TB-LEFTOVER", AfterTool: llmfake.Bool(true), Reply: llmfake.Reply{Text: "through"}},
	}, Default: &llmfake.Reply{Text: "ok"}})
	model := runtimetest.Model{URL: fake.URL, APIKey: "sk-tb-leftover"}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute) // only so that a regression fails rather than hangs
	defer cancel()

	before := newForFake(t, model).(*Runtime)
	before.resumeWindow = time.Second // the crashed bot gives the run up soon
	cs := &crashingSandbox{Sandbox: sb}
	require.NoError(t, before.Ensure(ctx, cs))
	sid, _, err := before.Session(ctx, cs, "", "web:leftover")
	require.NoError(t, err)
	_, err = before.Prompt(ctx, cs, sid, runtime.Prompt{Text: "Wait for the gate. TB-LEFTOVER", Timeout: 2 * time.Minute}, func(e runtime.Event) {
		if e.Kind == runtime.EventTool {
			cs.crash()
		}
	})
	require.ErrorIs(t, err, runtime.ErrPromptCut)
	require.NoError(t, runtimetest.Eventually(ctx, time.Minute, func() (bool, error) {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"pgrep", "-f", gateRE}, Timeout: time.Minute})
		return err == nil && res.ExitCode == 0, err
	}), "the old run's tool waits at the gate")

	// The new prompt goes out: whatever of the old run still goes on may pass the gate now.
	var leftAtPrompt sync.WaitGroup
	leftAtPrompt.Add(1)
	toolAtPrompt := -1
	hs := &promptHookSandbox{Sandbox: sb, onPrompt: func() {
		defer leftAtPrompt.Done()
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"sh", "-c", `pgrep -f "$1" >/dev/null; s=$?; touch "$2"; exit $s`, "sh", gateRE, gate}, Timeout: time.Minute})
		if err == nil {
			toolAtPrompt = res.ExitCode
		}
	}}
	after := newForFake(t, model).(*Runtime) // the bot after its restart: no Abort
	require.NoError(t, after.Ensure(ctx, hs))
	res, err := after.Prompt(ctx, hs, sid, runtime.Prompt{Text: "hello again", Timeout: 2 * time.Minute}, nil)
	require.NoError(t, err)
	leftAtPrompt.Wait()
	require.Equal(t, "ok", strings.TrimSpace(res.Answer))
	require.Equal(t, 1, toolAtPrompt, "the old run's tool was gone before the new prompt went out (0: it still ran)")

	// The old run ended aborted, its tool stopped at the gate; the new prompt had a run of its own.
	var msgs []struct {
		Info struct {
			Role  string    `json:"role"`
			Error *apiError `json:"error"`
		} `json:"info"`
		Parts []struct {
			Type  string `json:"type"`
			State struct {
				Status string `json:"status"`
				Output string `json:"output"`
			} `json:"state"`
		} `json:"parts"`
	}
	_, err = after.request(ctx, sb, http.MethodGet, "/session/"+url.PathEscape(sid)+"/message", nil, &msgs)
	require.NoError(t, err)
	var runs []string
	for _, m := range msgs {
		if m.Info.Role != "assistant" {
			continue
		}
		run := "finished"
		if m.Info.Error != nil {
			run = m.Info.Error.Name
		}
		for _, p := range m.Parts {
			if p.Type == "tool" {
				run += ", tool " + p.State.Status + ": " + strings.Join(strings.Fields(p.State.Output), " ")
			}
		}
		runs = append(runs, run)
	}
	require.Equal(t, []string{
		"MessageAbortedError, tool completed: (no output) <shell_metadata> User aborted the command </shell_metadata>",
		"finished",
	}, runs)
	reqs, err := fake.Requests(ctx)
	require.NoError(t, err)
	for _, r := range reqs {
		require.False(t, strings.Contains(r.Prompt, "TB-LEFTOVER") && r.AfterTool, "the model was asked to go on after the old run's gate")
	}
}

// TestLeftoverIsAbortedBeforeThePrompt, on a fake server: a session that is not idle as a prompt
// begins (busy, or retrying the model) runs a leftover, which is aborted, and the prompt sent only
// once the session is idle; an idle session costs one status read and no abort; a leftover that
// will not stop within the grace fails the turn before the prompt went out, as an error of its own
// (not sandbox-down, which the pool would answer by prompting again, nor cut: nothing was sent).
func TestLeftoverIsAbortedBeforeThePrompt(t *testing.T) {
	for _, tc := range []struct {
		name string
		// status is the session's status until an abort takes effect ("" for idle).
		status string
		// stops tells whether an abort takes effect.
		stops bool
		want  []string
	}{
		{"idle", "", true, []string{"status", "prompt"}},
		{"busy", "busy", true, []string{"status", "abort", "status", "prompt"}},
		{"retrying the model", "retry", true, []string{"status", "abort", "status", "prompt"}},
		{"busy, and it will not stop", "busy", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex // protects calls and aborted
			var calls []string
			aborted := false
			call := func(name string) {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, name)
				if name == "abort" && tc.stops {
					aborted = true
				}
			}
			prompted := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/event":
					serveOneRun(w, r, prompted)
				case "/session/status":
					call("status")
					mu.Lock()
					status := tc.status
					if aborted {
						status = ""
					}
					mu.Unlock()
					w.Header().Set("Content-Type", "application/json")
					if status == "" {
						fmt.Fprint(w, `{}`)
						return
					}
					fmt.Fprintf(w, `{"ses_1":{"type":%q}}`, status)
				case "/session/ses_1/abort":
					call("abort")
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `true`)
				case "/session/ses_1/prompt_async":
					call("prompt")
					close(prompted)
					w.WriteHeader(http.StatusNoContent)
				case "/session/ses_1/message":
					w.Header().Set("Content-Type", "application/json")
					select {
					case <-prompted:
						fmt.Fprint(w, `[{"info":{"id":"msg_02","role":"user"},"parts":[{"type":"text","text":"hi"}]},`+
							`{"info":{"id":"msg_03","role":"assistant","time":{"created":4,"completed":5}},"parts":[{"type":"text","text":"the answer"}]}]`)
					default:
						fmt.Fprint(w, `[]`)
					}
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			r, err := New(Config{Secret: "s", Model: Model{Name: "m"}})
			require.NoError(t, err)
			r.leftoverGrace = 300 * time.Millisecond
			res, err := r.Prompt(t.Context(), runtimetest.DialSandbox{Addr: srv.Listener.Addr().String()}, "ses_1", runtime.Prompt{Text: "hi"}, nil)
			mu.Lock()
			defer mu.Unlock()
			if !tc.stops {
				require.ErrorIs(t, err, errLeftoverRunning)
				require.Equal(t, runtime.ClassFatal, runtime.Classify(err), "%v", err)
				require.NotContains(t, calls, "prompt", "the prompt was not sent beside the leftover")
				require.Contains(t, calls, "abort")
				return
			}
			require.NoError(t, err)
			require.Equal(t, "the answer", res.Answer)
			require.Equal(t, tc.want, calls)
		})
	}
}
