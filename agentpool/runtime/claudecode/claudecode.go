// Package claudecode drives Claude Code's CLI in a sandbox: each turn is one
// `claude -p … --output-format stream-json --verbose` exec whose JSON lines become progress events.
// Nothing runs between turns; the conversation lives in Claude Code's transcript under the sandbox
// user's ~/.claude, which survives stop/start, and is continued with --resume.
package claudecode

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/proctree"
	"github.com/threadbox/threadbox/prompts"
	"github.com/threadbox/threadbox/sandbox"
)

// Name is the runtime's config name.
const Name = "claude-code"

// Config holds the model settings. The key reaches only the claude process of each turn (as
// ANTHROPIC_API_KEY in the exec's environment), never the sandbox's create-time environment, and
// String redacts it so that the config can be logged.
type Config struct {
	// Binary is the claude executable in the sandbox (default "claude", on PATH in threadbox/sandbox).
	Binary string
	// Model is passed as --model ("claude-sonnet-4-5", "sonnet", …); empty: Claude Code's default.
	Model string
	// BaseURL is ANTHROPIC_BASE_URL, without /v1; empty: Anthropic's API.
	BaseURL string
	// APIKey is ANTHROPIC_API_KEY.
	APIKey string
	// PermissionMode is passed as --permission-mode (default bypassPermissions: the sandbox is the
	// boundary, and nobody is there to approve a tool headless).
	PermissionMode string
	// Env is added to the claude process's environment (after the settings above).
	Env map[string]string
}

// String renders the config without the key.
func (c Config) String() string {
	key := ""
	if c.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("claude-code{model=%q base_url=%q api_key=%s permission_mode=%q}", c.Model, c.BaseURL, key, c.PermissionMode)
}

// Runtime implements runtime.Runtime for Claude Code. It keeps no state of its own: everything is in
// the sandbox, so any number of bots can drive it after a restart.
type Runtime struct {
	cfg Config
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a Claude Code runtime.
func New(cfg Config) *Runtime {
	if cfg.Binary == "" {
		cfg.Binary = "claude"
	}
	if cfg.PermissionMode == "" {
		cfg.PermissionMode = "bypassPermissions"
	}
	return &Runtime{cfg: cfg}
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return Name }

// Ensure checks that claude is installed and prepares the directories the bot relies on. There is no
// process to start, so this is one exec.
func (r *Runtime) Ensure(ctx context.Context, sb sandbox.Sandbox) error {
	var out strings.Builder
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Cmd:     []string{"/bin/sh", "-c", `mkdir -p input output/display && command -v "$1"`, "sh", r.cfg.Binary},
		Stdout:  &out,
		Timeout: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("claude-code: %w", runtime.SandboxDown(err))
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("claude-code: %q is not installed in the sandbox image (use threadbox/sandbox, see deploy/sandbox-image)", r.cfg.Binary)
	}
	return nil
}

// sessionIDPattern is what Claude Code accepts for --session-id: a UUID.
var sessionIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// transcriptScript exits 0 when the session's transcript exists. Claude Code keeps it under a
// directory named after the cwd, so look in all of them rather than recompute that name.
const transcriptScript = `for f in "$HOME"/.claude/projects/*/"$1".jsonl; do [ -f "$f" ] && exit 0; done; exit 1`

// Session implements runtime.Runtime. prevID is kept while its transcript exists; otherwise a new
// UUID is minted, and the first turn creates the session under it (--session-id). The title is not
// used: Claude Code sessions are found by id.
func (r *Runtime) Session(ctx context.Context, sb sandbox.Sandbox, prevID, title string) (string, bool, error) {
	if sessionIDPattern.MatchString(prevID) {
		ok, err := r.hasTranscript(ctx, sb, prevID)
		if err != nil {
			return "", false, err
		}
		if ok {
			return prevID, false, nil
		}
	}
	return newUUID(), true, nil
}

func (r *Runtime) hasTranscript(ctx context.Context, sb sandbox.Sandbox, id string) (bool, error) {
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", transcriptScript, "sh", id}, Timeout: 30 * time.Second})
	if err != nil {
		return false, fmt.Errorf("claude-code: looking for session %s: %w", id, runtime.SandboxDown(err))
	}
	switch {
	case res.ExitCode == 0 && !res.TimedOut:
		return true, nil
	case res.ExitCode == 1 && !res.TimedOut:
		return false, nil
	}
	// The look-up did not run to its answer (killed, timed out, no shell): that says nothing about the
	// transcript, and a new session would lose the agent's memory of the thread for good.
	return false, fmt.Errorf("claude-code: looking for session %s: the look-up exited %d: %w", id, res.ExitCode, runtime.ErrSandboxDown)
}

// promptScript resumes the session when its transcript exists and creates it otherwise, in one exec
// so that a turn costs no extra round trip. Stdin is passed through: it carries the prompt.
//
// First it kills a claude still running on the session, with what its tools started (the kill round,
// $1, seeded as Abort seeds it): turns of a thread never overlap, so one is a run whose exec was cut
// as the bot crashed (the bot that came back never aborted it), and the user's "retry" would
// otherwise run beside it, on the same transcript. The script's own command line never matches the
// pattern (the session id follows "sh", not the option).
const promptScript = `k=$1 id=$2; shift 2
for _ in 1 2 3; do [ -n "$(/bin/sh -c "$k" sh "pat:--(resume|session-id) $id" 2>/dev/null)" ] || break; done
for f in "$HOME"/.claude/projects/*/"$id".jsonl; do
  [ -f "$f" ] && exec "$@" --resume "$id"
done
exec "$@" --session-id "$id"`

// Prompt implements runtime.Runtime.
func (r *Runtime) Prompt(ctx context.Context, sb sandbox.Sandbox, sessionID string, p runtime.Prompt, emit func(runtime.Event)) (runtime.Result, error) {
	if !sessionIDPattern.MatchString(sessionID) {
		return runtime.Result{}, fmt.Errorf("claude-code: session id %q is not a UUID: %w", sessionID, runtime.ErrSessionMissing)
	}
	// The user's message goes on stdin, never in argv: as an argument, a message starting with "-"
	// is parsed as an option ("unknown option '--help …'"), and one over 128 KiB (Linux's limit on
	// one argv string) cannot be passed at all. With no prompt argument, claude -p reads stdin.
	args := []string{"/bin/sh", "-c", promptScript, "sh", proctree.Round, sessionID, r.cfg.Binary,
		"-p",
		"--output-format", "stream-json", "--verbose",
		"--permission-mode", r.cfg.PermissionMode,
	}
	if r.cfg.Model != "" {
		args = append(args, "--model", r.cfg.Model)
	}
	if p.System != "" {
		args = append(args, "--append-system-prompt", p.System)
	}
	parser := newStreamParser(emit)
	var stderr tailWriter
	in := &sentReader{r: strings.NewReader(prompts.Message(p.History, p.Text))}
	start := time.Now()
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Cmd:     args,
		Env:     r.env(p.Env),
		Stdin:   in,
		Timeout: p.Timeout,
		Stdout:  parser,
		Stderr:  &stderr,
		// The parser keeps only what it needs; never cut the stream before the result line.
		MaxOutput: 1 << 40,
	})
	parser.flush()
	if err != nil {
		if ctx.Err() != nil {
			return runtime.Result{}, fmt.Errorf("claude-code: turn stopped: %w", context.Cause(ctx))
		}
		if in.sent.Load() {
			// claude got the prompt, and the exec failed under it (its stream cut by a daemon restart or
			// a lost connection to the provider; the container gone): claude may have done part of the
			// work, and may still be running. Running it again could do the work twice.
			return runtime.Result{}, fmt.Errorf("claude-code: the turn's exec failed after claude got the prompt: %w",
				runtime.PromptCut(runtime.SandboxDown(err)))
		}
		// The prompt never left: the exec did not start (the container stopped or gone, the provider
		// unreachable), and it may be sent again.
		return runtime.Result{}, fmt.Errorf("claude-code: %w", runtime.SandboxDown(err))
	}
	result, lastText, bad, perr := parser.outcome()
	if perr != nil {
		return runtime.Result{}, perr
	}
	errText := strings.TrimSpace(stderr.String() + "\n" + strings.Join(bad, "\n"))
	switch {
	case res.TimedOut:
		return runtime.Result{}, fmt.Errorf("claude-code: the turn took longer than %s and was stopped", p.Timeout)
	case (result == nil || result.IsError) && strings.Contains(errText, "No conversation found"):
		// The transcript vanished between Session and Prompt (or was never written); claude then gives
		// no answer. The same words beside a successful result were printed by something else (a hook,
		// a process of the agent's): that turn ran, and running it again on a new session would be wrong.
		return runtime.Result{}, fmt.Errorf("claude-code: session %s: %w", sessionID, runtime.ErrSessionMissing)
	case result == nil:
		if derr := runtime.WentDownUnder(ctx, sb, res); derr != nil {
			// claude had the prompt (it ran) and went down with its sandbox: interrupted, which the
			// user can retry, not a failure of claude's own.
			return runtime.Result{}, fmt.Errorf("claude-code: claude %w", runtime.PromptCut(runtime.SandboxDown(derr)))
		}
		if res.ExitCode == 126 || res.ExitCode == 127 {
			return runtime.Result{}, fmt.Errorf("claude-code: %q could not be run (exit %d): %s", r.cfg.Binary, res.ExitCode, lastLine(errText))
		}
		return runtime.Result{}, fmt.Errorf("claude-code: claude exited %d without a result: %s", res.ExitCode, lastLine(errText))
	}
	out := runtime.Result{
		Answer:   result.Result,
		IsError:  result.IsError,
		ExitCode: res.ExitCode,
		Duration: time.Duration(result.DurationMS) * time.Millisecond,
		Usage: runtime.Usage{
			InputTokens:  runtime.SumTokens(result.Usage.InputTokens, result.Usage.CacheCreationInputTokens, result.Usage.CacheReadInputTokens),
			OutputTokens: runtime.SumTokens(result.Usage.OutputTokens),
			CostUSD:      runtime.SumCost(result.TotalCostUSD),
		},
	}
	if out.Duration == 0 {
		out.Duration = time.Since(start)
	}
	if out.IsError {
		out.Answer = errorAnswer(result, lastText, errText)
	}
	return out, nil
}

// errorAnswer turns a failed turn into a message for the chat.
func errorAnswer(r *resultLine, lastText string, errText string) string {
	msg := strings.TrimSpace(r.Result)
	switch {
	case r.APIErrorStatus != 0 || strings.HasPrefix(msg, "API Error"):
		msg = strings.TrimSpace(strings.TrimPrefix(msg, "API Error:"))
		return "The model API returned an error: " + msg
	case r.Subtype == "error_max_turns":
		return "The agent stopped: it reached its limit of turns."
	case msg == "" && lastText != "":
		msg = lastText
	case msg == "" && len(r.Errors) > 0:
		msg = strings.Join(r.Errors, "; ")
	case msg == "":
		msg = lastLine(errText)
	}
	if msg == "" {
		msg = r.Subtype
	}
	return "The agent failed: " + msg
}

// env is the claude process's environment: settings, then the turn's own variables (model keys the
// pool passes), which win.
func (r *Runtime) env(turn map[string]string) map[string]string {
	env := map[string]string{
		// Claude Code refuses to skip permissions as root unless told it is in a sandbox; harmless
		// as the agent user, and needed if an image runs as root.
		"IS_SANDBOX": "1",
		// No telemetry, update checks or other calls beyond the model API.
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_AUTOUPDATER":                      "1",
	}
	if r.cfg.BaseURL != "" {
		env["ANTHROPIC_BASE_URL"] = strings.TrimSuffix(r.cfg.BaseURL, "/")
	}
	if r.cfg.APIKey != "" {
		env["ANTHROPIC_API_KEY"] = r.cfg.APIKey
	}
	for k, v := range r.cfg.Env {
		env[k] = v
	}
	for k, v := range turn {
		env[k] = v
	}
	return env
}

// Abort implements runtime.Runtime: it kills the session's claude process, if one runs, and waits
// until none does. The pool normally cancels Prompt's ctx first, which kills it already; Abort also
// covers a turn whose caller went away (a bot restart).
func (r *Runtime) Abort(ctx context.Context, sb sandbox.Sandbox, sessionID string) error {
	if !sessionIDPattern.MatchString(sessionID) {
		return nil
	}
	// claude and what its tools started (a build, a push): SIGKILL does not pass on to children.
	if err := proctree.Kill(ctx, sb, sessionPattern(sessionID)); err != nil {
		return fmt.Errorf("claude-code: abort: %w", runtime.SandboxDown(err))
	}
	return nil
}

// sessionPattern is the proctree seed for the claude running session id: its command line has
// --resume or --session-id and the id.
func sessionPattern(id string) string { return "pat:--(resume|session-id) " + id }

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// sentReader is the prompt on its way to claude's stdin. It notes whether any of it was read: the
// providers copy stdin to a started process (Docker, Deno, local) or upload it just before starting it
// (Daytona), so once it was read the prompt may have reached claude, and a failure from then on is
// not one to send the prompt again after. The prompt is only on stdin, never in argv.
type sentReader struct {
	r    io.Reader
	sent atomic.Bool
}

func (s *sentReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.sent.Store(true)
	}
	return n, err
}

// tailWriter keeps the last 4 KiB written (stderr, for error messages).
type tailWriter struct{ b []byte }

func (w *tailWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if len(w.b) > 4096 {
		w.b = w.b[len(w.b)-4096:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string { return string(w.b) }

// lastLine is the last line of what claude printed, for an error message: that is outside input,
// and the message is stored (PostgreSQL text refuses NUL and invalid UTF-8) and shown in the chat, so
// invalid bytes become U+FFFD and NULs are dropped.
func lastLine(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if r := []rune(s); len(r) > 300 {
		s = string(r[:300]) + "…"
	}
	if s == "" {
		return "(no output)"
	}
	return s
}
