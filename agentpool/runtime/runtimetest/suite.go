// Package runtimetest is the conformance suite every agent runtime passes (issue 5's acceptance): the
// real runtime binary in a real Docker sandbox with network none, against the scripted model of
// llmfake running on the sandbox's own loopback.
//
//	func TestConformance(t *testing.T) {
//		runtimetest.Run(t, runtimetest.Config{
//			New:     func(t testing.TB, m runtimetest.Model) runtime.Runtime { return claudecode.New(…m.URL, m.APIKey…) },
//		})
//	}
//
// The steps share one sandbox and run in order, as a thread's turns would; each is a subtest named
// after the acceptance bullet it covers. The suite needs the Docker engine and threadbox/sandbox
// (deploy/sandbox-image/build.sh runtimes); without them it skips, or fails when
// THREADBOX_REQUIRE_SERVICES is set.
package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/llmfake"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/prompts"
	"github.com/threadbox/threadbox/sandbox"
)

// Model is where the runtime under test must send its model calls.
type Model struct {
	// URL is the fake's base URL inside the sandbox, without a path ("http://127.0.0.1:18089"); append
	// /v1 where the runtime's SDK expects it.
	URL string
	// APIKey is a per-run key; the suite checks that it reaches the model and nothing else.
	APIKey string
}

// Config describes the runtime under test.
type Config struct {
	// New returns the runtime configured for m.
	New func(t testing.TB, m Model) runtime.Runtime
	// Process is a pkill -f pattern for the long-running process the runtime keeps in the sandbox
	// ("^opencode serve"); empty when it keeps none (each turn is its own process).
	Process string
	// WrongAuth sends one request with a wrong password or token to the runtime's in-sandbox server
	// and returns the HTTP status; nil when the runtime has no server.
	WrongAuth func(ctx context.Context, sb sandbox.Sandbox) (int, error)
	// TurnTimeout bounds each turn (default 2 minutes).
	TurnTimeout time.Duration
	// Provider, when set, returns the provider the suite runs on, whose sandboxes are made from
	// Image() (default: Docker, as Provider returns it). Issue 13 runs opencode on Daytona's fake.
	Provider func(t *testing.T) sandbox.Provider
}

// Markers in the prompts select the fake's rules.
const (
	markWrite  = "TB-WRITE"
	markHang   = "TB-HANG"
	markFail   = "TB-FAIL"
	markGate   = "TB-GATE"
	gateText   = "Through the gate."
	gateFile   = "/tmp/tb-gate"
	fileBody   = "hello from the scripted model\n"
	wroteText  = "Wrote hello.txt for you: it is in output/display."
	defaultAns = "Noted, nothing else to do."
	failText   = "llmfake scripted failure"
	artifact   = "output/display/hello.txt"
)

// Script is the fake's script for the suite. Title or summary calls a runtime makes on the side get
// the default text.
func Script(workDir string) llmfake.Script {
	return llmfake.Script{
		Rules: []llmfake.Rule{
			{PromptContains: markWrite, AfterTool: llmfake.Bool(false), Reply: llmfake.Reply{
				WriteFile: &llmfake.WriteFile{Path: workDir + "/" + artifact, Content: fileBody}}},
			{PromptContains: markWrite, AfterTool: llmfake.Bool(true), Reply: llmfake.Reply{Text: wroteText}},
			{PromptContains: markHang, Reply: llmfake.Reply{Hang: true}},
			// A turn that runs until the test opens the gate (a file), for a test to act mid-turn.
			{PromptContains: markGate, AfterTool: llmfake.Bool(false), Reply: llmfake.Reply{Tool: &llmfake.ToolCall{Name: "bash",
				Args: json.RawMessage(`{"command":"while [ ! -e ` + gateFile + ` ]; do sleep 0.05; done; echo open","description":"Wait for the gate"}`)}}},
			{PromptContains: markGate, AfterTool: llmfake.Bool(true), Reply: llmfake.Reply{Text: gateText}},
			{PromptContains: markFail, Reply: llmfake.Reply{Error: &llmfake.APIError{Status: 400, Message: failText}}},
		},
		Default: &llmfake.Reply{Text: defaultAns},
	}
}

// suite is the state the steps share, in order.
type suite struct {
	cfg   Config
	p     sandbox.Provider
	h     sandbox.Handle
	sb    sandbox.Sandbox
	fake  *Fake
	rt    runtime.Runtime
	key   string
	title string
	sid   string
}

// Run runs the conformance suite.
func Run(t *testing.T, cfg Config) {
	require.NotNil(t, cfg.New, "runtimetest.Config.New is required")
	if cfg.TurnTimeout == 0 {
		cfg.TurnTimeout = 2 * time.Minute
	}
	var p sandbox.Provider
	if cfg.Provider != nil {
		p = cfg.Provider(t)
	} else {
		p = Provider(t)
	}
	bin := BuildFake(t)
	s := &suite{cfg: cfg, p: p, key: "sk-tb-" + rand.Text()[:16], title: "slack:T1:C1:" + rand.Text()[:8]}
	s.sb, s.h = NewSandbox(t, p, t.Name())
	s.fake = StartFake(t, s.sb, bin, Script(sandbox.DefaultWorkDir))
	s.rt = cfg.New(t, Model{URL: s.fake.URL, APIKey: s.key})

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"EnsureFromCold", s.ensureFromCold},
		{"WriteToolTurnAndArtifact", s.writeTurn},
		{"EventStreamCutMidTurn", s.streamCut},
		{"ResumeAfterDockerStop", s.resumeAfterStop},
		{"ProcessKilledBetweenTurns", s.processKilled},
		{"AbortLongTurn", s.abort},
		{"WrongAuthRefused", s.wrongAuth},
		{"ModelErrorIsClear", s.modelError},
	}
	for _, st := range steps {
		// A failed step leaves the sandbox in an unknown state; the next steps would only fail in
		// confusing ways.
		if !t.Run(st.name, st.run) {
			t.Fatalf("step %s failed; later steps not run", st.name)
		}
	}
}

func (s *suite) ensureFromCold(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	require.NoError(t, s.rt.Ensure(ctx, s.sb))
	t.Logf("%s: Ensure from cold took %s", s.rt.Name(), time.Since(start).Round(time.Millisecond))
	// Healthy now: a second Ensure is the per-turn check and must be cheap (no relaunch).
	start = time.Now()
	require.NoError(t, s.rt.Ensure(ctx, s.sb))
	t.Logf("%s: Ensure when healthy took %s", s.rt.Name(), time.Since(start).Round(time.Millisecond))
	if s.cfg.Process != "" {
		require.Equal(t, 1, s.countProcesses(t), "exactly one %q after two Ensures", s.cfg.Process)
	}
}

// turn runs one prompt to completion and returns its result and events.
func (s *suite) turn(t *testing.T, ctx context.Context, text, history string) (runtime.Result, []runtime.Event, error) {
	t.Helper()
	var (
		mu     sync.Mutex
		events []runtime.Event
	)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TurnTimeout)
	defer cancel()
	res, err := s.rt.Prompt(ctx, s.sb, s.sid, runtime.Prompt{
		Text: text, History: history, Timeout: s.cfg.TurnTimeout,
		System: prompts.System(prompts.SystemData{WorkDir: sandbox.DefaultWorkDir}),
	}, func(e runtime.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	mu.Lock()
	defer mu.Unlock()
	return res, append([]runtime.Event(nil), events...), err
}

func (s *suite) writeTurn(t *testing.T) {
	ctx := t.Context()
	sid, _, err := s.rt.Session(ctx, s.sb, "", s.title)
	require.NoError(t, err)
	require.NotEmpty(t, sid)
	s.sid = sid

	res, events, err := s.turn(t, ctx, "Please create the greeting file. "+markWrite, "")
	require.NoError(t, err)
	require.False(t, res.IsError, "answer: %s", res.Answer)
	require.Equal(t, wroteText, strings.TrimSpace(res.Answer), "the answer is the model's final text")

	var tool, text bool
	for _, e := range events {
		switch e.Kind {
		case runtime.EventTool:
			tool = tool || strings.Contains(strings.ToLower(e.Tool+" "+e.Text), "write")
		case runtime.EventText:
			text = true
		}
		require.False(t, e.At.IsZero(), "every event is timestamped")
	}
	require.True(t, tool, "a tool event for the write: %+v", events)
	require.True(t, text, "text events: %+v", events)

	data, err := s.sb.ReadFile(ctx, artifact, 0)
	require.NoError(t, err, "the model's write tool call created the file")
	require.Equal(t, fileBody, string(data))
	found, skipped, err := agentpool.CollectArtifacts(ctx, s.sb, noUploads{}, s.title, agentpool.ArtifactLimits{})
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Len(t, found, 1, "the pool's artifact step picks the file up")
	require.Equal(t, "hello.txt", found[0].Path)
	require.Equal(t, fileBody, string(found[0].Data))

	reqs, err := s.fake.Requests(ctx)
	require.NoError(t, err)
	var first, afterTool bool
	for _, r := range reqs {
		if r.API == "" {
			continue
		}
		require.True(t, strings.Contains(fmt.Sprint(r.Header), s.key), "the model key reaches the model API (headers: %v)", redact(r.Header, s.key))
		first = first || strings.Contains(r.Prompt, markWrite) && !r.AfterTool
		afterTool = afterTool || strings.Contains(r.Prompt, markWrite) && r.AfterTool
	}
	require.True(t, first && afterTool, "the fake saw the prompt, then the tool result")
	// Keys go to the runtime's process only: a plain exec in the sandbox must not see them.
	require.NotContains(t, Sh(t, s.sb, "env"), s.key, "the model key leaked into the sandbox's environment")
}

// streamCut cuts every connection to the runtime's server while a turn runs (a tunnel hiccup): the
// event stream, and any call in flight. The runtime must follow the same run to its end, and the
// model must see the prompt once: sending it again would run the agent's work twice.
func (s *suite) streamCut(t *testing.T) {
	if s.cfg.Process == "" {
		t.Skipf("%s has no server to reach: each turn is one exec", s.rt.Name())
	}
	ctx := t.Context()
	cs := &CutSandbox{Sandbox: s.sb}
	// A runtime of its own, so that every connection it makes goes through cs.
	rt := s.cfg.New(t, Model{URL: s.fake.URL, APIKey: s.key})
	require.NoError(t, rt.Ensure(ctx, cs))
	sid, replaced, err := rt.Session(ctx, cs, s.sid, s.title)
	require.NoError(t, err)
	require.False(t, replaced)
	require.Equal(t, s.sid, sid)
	Sh(t, s.sb, `rm -f "$1"`, gateFile)

	type outcome struct {
		res runtime.Result
		err error
	}
	tool := make(chan struct{}, 1)
	done := make(chan outcome, 1)
	tctx, cancel := context.WithTimeout(ctx, s.cfg.TurnTimeout)
	defer cancel()
	go func() {
		res, err := rt.Prompt(tctx, cs, sid, runtime.Prompt{Text: "Wait for the gate. " + markGate, Timeout: s.cfg.TurnTimeout},
			func(e runtime.Event) {
				if e.Kind == runtime.EventTool {
					select {
					case tool <- struct{}{}:
					default:
					}
				}
			})
		done <- outcome{res, err}
	}()
	select {
	case <-tool: // the agent runs the tool, which waits for the gate
	case out := <-done:
		require.FailNow(t, "the turn ended before its tool ran", "%+v %v", out.res, out.err)
	}
	cut := cs.Cut()
	require.Positive(t, cut, "connections were open mid-turn")
	Sh(t, s.sb, `touch "$1"`, gateFile)
	out := <-done
	require.NoError(t, out.err, "the run is followed to its end")
	require.Equal(t, gateText, strings.TrimSpace(out.res.Answer))
	require.Greater(t, cs.Dials(), cut, "it connected again")

	reqs, err := s.fake.Requests(ctx)
	require.NoError(t, err)
	prompts := 0
	for _, r := range reqs {
		if strings.Contains(r.Prompt, markGate) && !r.AfterTool {
			prompts++
		}
	}
	require.Equal(t, 1, prompts, "the model got the prompt once")
}

func (s *suite) resumeAfterStop(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	require.NoError(t, s.p.Stop(ctx, s.h))
	require.NoError(t, s.p.Start(ctx, s.h))
	t.Logf("%s stop+start took %s", s.p.Name(), time.Since(start).Round(time.Millisecond))
	s.fake.Restart(t, Script(sandbox.DefaultWorkDir))

	start = time.Now()
	require.NoError(t, s.rt.Ensure(ctx, s.sb))
	t.Logf("%s: Ensure after stop took %s", s.rt.Name(), time.Since(start).Round(time.Millisecond))
	sid, replaced, err := s.rt.Session(ctx, s.sb, s.sid, s.title)
	require.NoError(t, err)
	require.False(t, replaced, "the agent session survives docker stop")
	require.Equal(t, s.sid, sid)

	res, _, err := s.turn(t, ctx, "What did you just do? TB-SECOND", "")
	require.NoError(t, err)
	require.Equal(t, defaultAns, strings.TrimSpace(res.Answer))
	s.requireHistorySeen(t, "TB-SECOND")
}

// requireHistorySeen checks that the model call for the turn marked mark carried the first turn.
func (s *suite) requireHistorySeen(t *testing.T, mark string) {
	t.Helper()
	reqs, err := s.fake.Requests(t.Context())
	require.NoError(t, err)
	for _, r := range reqs {
		if strings.Contains(r.Prompt, mark) {
			require.Contains(t, string(r.Body), markWrite, "the model sees the earlier messages of the session")
			require.Contains(t, string(r.Body), wroteText)
			return
		}
	}
	require.Fail(t, "no model call for "+mark)
}

func (s *suite) processKilled(t *testing.T) {
	if s.cfg.Process == "" {
		t.Skipf("%s keeps no process between turns: each turn is its own exec", s.rt.Name())
	}
	ctx := t.Context()
	// pkill runs directly: a shell's own command line would contain the pattern and match.
	_, err := s.sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"pkill", "-KILL", "-f", s.cfg.Process}, Timeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, Eventually(ctx, 10*time.Second, func() (bool, error) { return s.countProcesses(t) == 0, nil }))
	start := time.Now()
	require.NoError(t, s.rt.Ensure(ctx, s.sb), "Ensure brings the runtime back")
	t.Logf("%s: Ensure after kill took %s", s.rt.Name(), time.Since(start).Round(time.Millisecond))
	require.Equal(t, 1, s.countProcesses(t))
	sid, replaced, err := s.rt.Session(ctx, s.sb, s.sid, s.title)
	require.NoError(t, err)
	require.False(t, replaced)
	require.Equal(t, s.sid, sid)
	res, _, err := s.turn(t, ctx, "Still there? TB-THIRD", "")
	require.NoError(t, err)
	require.Equal(t, defaultAns, strings.TrimSpace(res.Answer))
	s.requireHistorySeen(t, "TB-THIRD")
}

func (s *suite) countProcesses(t *testing.T) int {
	var out strings.Builder
	res, err := s.sb.Exec(t.Context(), sandbox.ExecRequest{Cmd: []string{"pgrep", "-f", s.cfg.Process}, Stdout: &out, Timeout: time.Minute})
	require.NoError(t, err)
	require.Contains(t, []int{0, 1}, res.ExitCode, "pgrep")
	return len(strings.Fields(out.String()))
}

func (s *suite) abort(t *testing.T) {
	ctx := t.Context()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res runtime.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, _, err := s.turn(t, tctx, "Take your time. "+markHang, "")
		done <- outcome{res, err}
	}()
	// The model call is open (the fake holds it): the turn is running.
	require.NoError(t, Eventually(ctx, time.Minute, func() (bool, error) { return s.fakeSaw(t, markHang, false), nil }), "the long turn never reached the model")
	cancel()
	var out outcome
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		require.Fail(t, "Prompt did not return within 30 s of its ctx being cancelled")
	}
	require.Error(t, out.err, "a cancelled turn reports its cancellation")
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	require.NoError(t, s.rt.Abort(actx, s.sb, s.sid), "Abort leaves the session idle")
	require.NoError(t, Eventually(ctx, 30*time.Second, func() (bool, error) { return s.fakeSaw(t, markHang, true), nil }),
		"the runtime really stopped: it hung up on the model call")

	res, _, err := s.turn(t, ctx, "Are you free again? TB-AFTER-ABORT", "")
	require.NoError(t, err, "the runtime is usable after an abort")
	require.Equal(t, defaultAns, strings.TrimSpace(res.Answer))
}

// fakeSaw reports whether a model call for mark was recorded (cancelled: and then abandoned).
func (s *suite) fakeSaw(t *testing.T, mark string, cancelled bool) bool {
	reqs, err := s.fake.Requests(t.Context())
	if err != nil {
		return false
	}
	for _, r := range reqs {
		if strings.Contains(r.Prompt, mark) && (!cancelled || r.Cancelled) {
			return true
		}
	}
	return false
}

func (s *suite) wrongAuth(t *testing.T) {
	if s.cfg.WrongAuth == nil {
		t.Skipf("%s has no in-sandbox server to authenticate to", s.rt.Name())
	}
	status, err := s.cfg.WrongAuth(t.Context(), s.sb)
	require.NoError(t, err)
	require.Equal(t, 401, status, "a wrong password or token is refused")
	// And the refusal did not disturb the real one.
	require.NoError(t, s.rt.Ensure(t.Context(), s.sb))
}

func (s *suite) modelError(t *testing.T) {
	res, _, err := s.turn(t, t.Context(), "This will fail. "+markFail, "")
	require.NoError(t, err, "a model error is the turn's answer, not a runtime failure")
	require.True(t, res.IsError)
	require.Contains(t, res.Answer, failText, "the user sees the model's message")
	require.Contains(t, strings.ToLower(res.Answer), "model", "and that it came from the model")
	// The history-replay path: a replaced session gets the thread's history in the prompt.
	sid, _, err := s.rt.Session(t.Context(), s.sb, "", s.title+"-replaced")
	require.NoError(t, err)
	s.sid = sid
	history := prompts.Replay(prompts.ReplayData{Turns: []prompts.Turn{{User: "REPLAYED-USER", Assistant: "REPLAYED-ANSWER"}}})
	res, _, err = s.turn(t, t.Context(), "Carry on. TB-REPLAY", history)
	require.NoError(t, err)
	require.False(t, res.IsError, res.Answer)
	reqs, err := s.fake.Requests(t.Context())
	require.NoError(t, err)
	var seen bool
	for _, r := range reqs {
		seen = seen || strings.Contains(r.Prompt, "TB-REPLAY") && strings.Contains(r.Prompt, "REPLAYED-ANSWER")
	}
	require.True(t, seen, "the replayed history reaches the model with the new message")
}

// noUploads is an artifact store where nothing was uploaded yet.
type noUploads struct{}

func (noUploads) ArtifactRecord(context.Context, db.NewArtifact) (db.Artifact, error) {
	return db.Artifact{}, nil
}

func (noUploads) ArtifactLookup(context.Context, string, string, string) (db.Artifact, error) {
	return db.Artifact{}, db.ErrNotFound
}

var _ db.ArtifactStore = noUploads{}

func redact(h map[string][]string, key string) string {
	return strings.ReplaceAll(fmt.Sprint(h), key, "[key]")
}
