// Package sandboxagent drives rivet's sandbox-agent (`sandbox-agent server --token … --no-telemetry`)
// inside a sandbox, reached through the provider's Dial. Sessions are ACP (Agent Client Protocol)
// JSON-RPC: initialize, session/new, session/prompt, and session/load to restore a session after the
// server or sandbox restarted. The agent behind it is opencode (`opencode acp`, pre-placed in the
// image); it keeps sessions in its own database, so session/load restores the whole history.
package sandboxagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sandboxhttp"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/prompts"
	"github.com/threadbox/threadbox/sandbox"
)

// Name is the runtime's config name.
const Name = "sandbox-agent"

// Defaults for Config.
const (
	DefaultPort           = 2468
	DefaultAgent          = "opencode"
	DefaultRequestTimeout = 6 * time.Hour
)

// Config configures the runtime.
type Config struct {
	// Secret is the service secret the per-sandbox tokens are derived from (required).
	Secret string
	// Agent is the ACP agent sandbox-agent runs. Only "opencode" is pre-placed in threadbox/sandbox
	// (claude would need Node and claude-agent-acp in the image).
	Agent string
	// Model is the model the agent calls; its key reaches only the server's process (and the agents
	// it spawns), at launch.
	Model opencode.Model
	// Binary is the sandbox-agent executable (default "sandbox-agent").
	Binary string
	// Port is the server's port on the sandbox's loopback (default DefaultPort).
	Port int
	// RequestTimeout is how long the server lets one ACP request (a whole turn) run
	// (SANDBOX_AGENT_ACP_REQUEST_TIMEOUT_MS; default DefaultRequestTimeout, far above its 2 minutes).
	RequestTimeout time.Duration
}

// Runtime implements runtime.Runtime for sandbox-agent. It is safe for concurrent use.
type Runtime struct {
	cfg     Config
	clients *sandboxhttp.Clients
	state   states
	// initTimeout bounds an initialize call (default initTimeout).
	initTimeout time.Duration
	// resumeWindow bounds the attempts to follow a run again after its event stream dropped
	// (default DefaultResumeWindow).
	resumeWindow time.Duration
}

// initTimeout bounds initialize, which spawns the agent process at most: the server's health check
// answers while the agent behind it is wedged, and nothing else would notice before the watchdog.
const initTimeout = 2 * time.Minute

var _ runtime.Runtime = (*Runtime)(nil)

// New validates cfg and returns the runtime.
func New(cfg Config) (*Runtime, error) {
	if cfg.Secret == "" {
		return nil, errors.New("sandbox-agent: a service secret is required (the server tokens derive from it)")
	}
	if cfg.Agent == "" {
		cfg.Agent = DefaultAgent
	}
	if cfg.Agent != "opencode" {
		return nil, fmt.Errorf("sandbox-agent: agent %q is not installed in the sandbox image; use %q", cfg.Agent, DefaultAgent)
	}
	if err := cfg.Model.Validate(); err != nil {
		return nil, err
	}
	if cfg.Binary == "" {
		cfg.Binary = "sandbox-agent"
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	// No header timeout: a session/prompt call answers only when the turn is over. A 202 answer is not
	// decoded.
	clients := &sandboxhttp.Clients{Port: cfg.Port, AcceptedIsEmpty: true}
	return &Runtime{cfg: cfg, clients: clients, state: states{m: map[string]*sbState{}}, initTimeout: initTimeout}, nil
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

var _ runtime.LogFile = (*Runtime)(nil)

// LogPath implements runtime.LogFile: the server's output, replaced at each launch.
func (r *Runtime) LogPath() string { return logPath }

// Session implements runtime.Runtime: prevID when the agent can load it, else a new session. ACP
// sessions have no title, so title is unused: the pool keeps the id.
func (r *Runtime) Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (string, bool, error) {
	workDir, err := r.workDir(ctx, sb)
	if err != nil {
		return "", false, err
	}
	if err := r.initialize(ctx, sb); err != nil {
		return "", false, err
	}
	if prevID != "" {
		var loaded bool
		r.state.with(sb, func(st *sbState) { loaded = st.loaded[prevID] })
		if loaded {
			return prevID, false, nil
		}
		err := r.callResult(ctx, sb, "session/load", map[string]any{"sessionId": prevID, "cwd": workDir, "mcpServers": []any{}}, nil)
		var rpcErr *rpcError
		switch {
		case err == nil:
			r.state.with(sb, func(st *sbState) { st.loaded[prevID] = true })
			return prevID, false, nil
		case !errors.As(err, &rpcErr):
			return "", false, fmt.Errorf("sandbox-agent: loading session %s: %w", prevID, err)
		}
		// The agent does not know the session (its errors do not say why): start a new one.
	}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := r.callResult(ctx, sb, "session/new", map[string]any{"cwd": workDir, "mcpServers": []any{}}, &created); err != nil {
		return "", false, fmt.Errorf("sandbox-agent: creating a session: %w", err)
	}
	if err := runtime.CheckSessionID(created.SessionID); err != nil {
		return "", false, fmt.Errorf("sandbox-agent: creating a session: %w", err)
	}
	r.state.with(sb, func(st *sbState) { st.loaded[created.SessionID] = true })
	return created.SessionID, true, nil
}

// initialize spawns the agent process if needed (the first POST with ?agent= does) and notes which
// ACP server generation the remembered sessions belong to.
func (r *Runtime) initialize(ctx context.Context, sb sandbox.Sandbox) error {
	ictx, cancel := context.WithTimeout(ctx, r.initTimeout)
	defer cancel()
	err := r.callResult(ictx, sb, "initialize", map[string]any{
		"protocolVersion":    1,
		"clientCapabilities": map[string]any{"fs": map[string]bool{"readTextFile": false, "writeTextFile": false}, "terminal": false},
	}, nil)
	if err != nil && ctx.Err() == nil && ictx.Err() != nil {
		// The server answers its health check but not the agent: the next Ensure restarts it.
		r.state.with(sb, func(st *sbState) { st.wedged = true })
		return fmt.Errorf("sandbox-agent: initialize: no answer within %s: %w", r.initTimeout, runtime.ErrSandboxDown)
	}
	if err != nil {
		return fmt.Errorf("sandbox-agent: initialize: %w", err)
	}
	gen, err := r.generation(ctx, sb)
	if err != nil {
		return err
	}
	if gen != 0 {
		r.state.setGen(sb, gen)
	}
	return nil
}

// generation returns our ACP server's createdAtMs, 0 when it is not listed.
func (r *Runtime) generation(ctx context.Context, sb sandbox.Sandbox) (int64, error) {
	var list struct {
		Servers []struct {
			ServerID    string `json:"serverId"`
			CreatedAtMs int64  `json:"createdAtMs"`
		} `json:"servers"`
	}
	if _, err := r.request(ctx, sb, http.MethodGet, "/v1/acp", nil, &list); err != nil {
		return 0, fmt.Errorf("sandbox-agent: listing ACP servers: %w", err)
	}
	for _, s := range list.Servers {
		if s.ServerID == r.serverID() {
			return s.CreatedAtMs, nil
		}
	}
	return 0, nil
}

// workDir is the agents' cwd: the sandbox's working directory, as the launch exec reported it.
func (r *Runtime) workDir(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	var dir string
	r.state.with(sb, func(st *sbState) { dir = st.workDir })
	if dir != "" {
		return dir, nil
	}
	var out strings.Builder
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"pwd"}, Stdout: &out, Timeout: 30 * time.Second}); err != nil {
		return "", fmt.Errorf("sandbox-agent: %w", runtime.SandboxDown(err))
	}
	dir = strings.TrimSpace(out.String())
	r.state.setWorkDir(sb, dir)
	return dir, nil
}

// Prompt implements runtime.Runtime. p.Env is not used: the server process got its environment
// (the model key among it) when Ensure launched it, from Config.Model.
func (r *Runtime) Prompt(ctx context.Context, sb sandbox.Sandbox, sessionID string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	var (
		lastID, loaded, sysSent = "", false, false
		gen                     int64
		done                    = make(chan struct{})
	)
	r.state.with(sb, func(st *sbState) {
		lastID, loaded, sysSent, gen = st.lastEventID, st.loaded[sessionID], st.systemSent[sessionID], st.gen
		st.running[sessionID] = done
	})
	defer func() {
		r.state.with(sb, func(st *sbState) {
			if st.running[sessionID] == done {
				delete(st.running, sessionID)
			}
		})
		close(done)
	}()
	if !loaded {
		// The server restarted since Session: the pool recovers by asking for the session again.
		return runtime.Result{}, fmt.Errorf("sandbox-agent: session %s is not loaded in the agent: %w", sessionID, runtime.ErrSessionMissing)
	}
	// The stream outlives ctx: after a cancel it still tells when the turn really ended.
	detached := context.WithoutCancel(ctx)
	ev, err := r.subscribe(ctx, sb, lastID)
	if err != nil {
		return runtime.Result{}, err
	}
	run := &run{ev: ev, promptID: newID("prompt"), gen: gen}
	defer func() { run.ev.close() }()
	if err := r.barrier(ctx, sb, ev); err != nil {
		return runtime.Result{}, err
	}
	r.state.with(sb, func(st *sbState) { run.last = st.lastEventID })

	var blocks []any
	if p.System != "" && !sysSent {
		// ACP has no system prompt: it opens the session's first message instead.
		blocks = append(blocks, map[string]string{"type": "text", "text": "<instructions>\n" + p.System + "\n</instructions>"})
	}
	blocks = append(blocks, map[string]string{"type": "text", "text": prompts.Message(p.History, p.Text)})
	pctx, pcancel := context.WithCancel(detached)
	defer pcancel()
	posted := make(chan postOutcome, 1)
	run.posted = posted
	go func() {
		raw, _ := json.Marshal(run.promptID)
		var resp message
		status, err := r.request(pctx, sb, http.MethodPost, r.acpPath(), rpcEnvelope(raw, "session/prompt", map[string]any{"sessionId": sessionID, "prompt": blocks}), &resp)
		posted <- postOutcome{status: status, err: err}
	}()

	turn := newTurnState(sessionID, emit)
	start := time.Now()
	final, err := r.follow(ctx, sb, run, turn)
	if err != nil {
		if ctx.Err() != nil {
			r.cancelTurn(ctx, sb, sessionID, run)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && p.Timeout > 0 {
				return runtime.Result{}, fmt.Errorf("sandbox-agent: the turn took longer than %s and was stopped", p.Timeout)
			}
			return runtime.Result{}, fmt.Errorf("sandbox-agent: turn stopped: %w", context.Cause(ctx))
		}
		return runtime.Result{}, err
	}
	r.state.with(sb, func(st *sbState) { st.systemSent[sessionID] = true })
	if turn.err != nil {
		return runtime.Result{}, turn.err
	}
	res := runtime.Result{Answer: turn.answer(), Duration: time.Since(start)}
	if final.Error != nil {
		res.IsError, res.Answer = true, errorAnswer(final.Error)
		return res, nil
	}
	var pr promptResult
	if err := json.Unmarshal(final.Result, &pr); err != nil {
		return runtime.Result{}, fmt.Errorf("sandbox-agent: session/prompt result: %w", err)
	}
	res.Usage = runtime.Usage{InputTokens: runtime.SumTokens(pr.Usage.InputTokens), OutputTokens: runtime.SumTokens(pr.Usage.OutputTokens),
		CostUSD: runtime.SumCost(turn.costUSD)}
	if pr.StopReason != "end_turn" && pr.StopReason != "" {
		res.IsError = true
		if res.Answer == "" || pr.StopReason != "max_tokens" {
			res.Answer = stopMessage(pr.StopReason)
		}
	}
	return res, nil
}

// barrier sends a request no agent implements and reads the stream up to its echo: whatever the
// stream replays from before is skipped, and everything after belongs to what we send next.
func (r *Runtime) barrier(ctx context.Context, sb sandbox.Sandbox, ev *stream) error {
	id := newID("barrier")
	if _, err := r.call(ctx, sb, id, "threadbox/barrier", nil); err != nil {
		return fmt.Errorf("sandbox-agent: %w", err)
	}
	want, _ := json.Marshal(id)
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		select {
		case <-bctx.Done():
			return fmt.Errorf("sandbox-agent: the event stream did not catch up: %w: %w", runtime.ErrSandboxDown, bctx.Err())
		case f, ok := <-ev.c:
			if !ok {
				return ev.ended()
			}
			r.state.with(sb, func(st *sbState) { st.setLastEventID(f.id) })
			if string(f.msg.ID) == string(want) && f.msg.Method == "" {
				return nil
			}
		}
	}
}

// follow reads the stream until the prompt's response is echoed, reporting progress and granting
// the agent's permission requests (the sandbox is the boundary; nobody is there to approve). A stream
// that drops is subscribed again after the last event seen (resume).
func (r *Runtime) follow(ctx context.Context, sb sandbox.Sandbox, run *run, turn *turnState) (*message, error) {
	want, _ := json.Marshal(run.promptID)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case p := <-run.posted:
			run.posted = nil
			if err := p.failure(); err != nil {
				return nil, err
			}
		case f, ok := <-run.ev.c:
			if !ok {
				if run.pace.Wait(ctx) != nil {
					return nil, ctx.Err()
				}
				if err := r.resume(ctx, sb, run); err != nil {
					return nil, err
				}
				continue
			}
			if !run.next(f.id) {
				continue // replayed, seen already
			}
			run.pace.Reset()
			if run.lost {
				return nil, fmt.Errorf("sandbox-agent: the event stream was followed again, but events of the run were lost: %w", runtime.ErrPromptCut)
			}
			if run.restart {
				return nil, fmt.Errorf("sandbox-agent: the event stream's ids started over (%s after %s): %w: %w",
					f.id, run.last, errServerRestarted, runtime.ErrPromptCut)
			}
			r.state.with(sb, func(st *sbState) { st.setLastEventID(f.id) })
			switch {
			case f.msg.Method == "" && string(f.msg.ID) == string(want):
				return &f.msg, nil
			case f.msg.Method == "session/update":
				turn.handle(f.msg.Params)
			case f.msg.Method == "session/request_permission" && f.msg.ID != nil:
				_ = r.respond(ctx, sb, f.msg.ID, map[string]any{"outcome": allowOutcome(f.msg.Params)})
			}
		}
	}
}

// allowOutcome picks the most permissive option the agent offers.
func allowOutcome(params json.RawMessage) map[string]string {
	var p struct {
		Options []struct {
			OptionID string `json:"optionId"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	_ = json.Unmarshal(params, &p)
	for _, want := range []string{"allow_always", "allow_once"} {
		for _, o := range p.Options {
			if o.Kind == want {
				return map[string]string{"outcome": "selected", "optionId": o.OptionID}
			}
		}
	}
	return map[string]string{"outcome": "cancelled"}
}

const stopGrace = 20 * time.Second

// cancelTurn stops a turn whose caller gave up and waits (bounded) for the agent to confirm.
func (r *Runtime) cancelTurn(ctx context.Context, sb sandbox.Sandbox, sessionID string, run *run) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace)
	defer cancel()
	if err := r.notify(sctx, sb, "session/cancel", map[string]string{"sessionId": sessionID}); err != nil {
		return
	}
	turn := newTurnState(sessionID, nil)
	_, _ = r.follow(sctx, sb, run, turn)
}

// Abort implements runtime.Runtime: session/cancel, then wait for a prompt of this runtime still
// running in the session to end.
func (r *Runtime) Abort(ctx context.Context, sb sandbox.Sandbox, sessionID string) error {
	if err := r.notify(ctx, sb, "session/cancel", map[string]string{"sessionId": sessionID}); err != nil {
		return fmt.Errorf("sandbox-agent: abort: %w", err)
	}
	var running chan struct{}
	r.state.with(sb, func(st *sbState) { running = st.running[sessionID] })
	if running == nil {
		return nil
	}
	select {
	case <-running:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox-agent: abort: session %s still running: %w", sessionID, ctx.Err())
	}
}
