package claudecode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
)

// MaxLineBytes bounds one line of Claude Code's output. The result line carries the whole answer
// (and an assistant line the same text), so this leaves room for a 10 MB answer, JSON escaping
// included.
const MaxLineBytes = 32 << 20

// streamParser turns `claude -p --output-format stream-json --verbose` output, one JSON object per
// line, into progress events and the turn's result. It is an io.Writer fed by the exec's stdout
// copier, so lines may arrive split across writes.
type streamParser struct {
	emit    func(runtime.Event)
	now     func() time.Time
	maxLine int

	mu      sync.Mutex // protects the following (Write runs on the copier goroutine, result on the caller's)
	partial []byte
	result  *resultLine
	// lastText is the assistant's last text block, the fallback answer when no result line came.
	lastText string
	// bad keeps the first lines that were not JSON (claude prints some errors as plain text on stdout).
	bad []string
	// err is set once a line outgrew maxLine; everything after it is drained unread.
	err error
}

// line is the envelope every stream-json line shares.
type line struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	Message struct {
		Content []block `json:"content"`
	} `json:"message"`
}

type block struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// resultLine is the last line of a turn.
type resultLine struct {
	Subtype        string  `json:"subtype"`
	IsError        bool    `json:"is_error"`
	Result         string  `json:"result"`
	SessionID      string  `json:"session_id"`
	NumTurns       int     `json:"num_turns"`
	DurationMS     int64   `json:"duration_ms"`
	TotalCostUSD   float64 `json:"total_cost_usd"`
	APIErrorStatus int     `json:"api_error_status"`
	TerminalReason string  `json:"terminal_reason"`
	Errors         []string
	Usage          struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

func newStreamParser(emit func(runtime.Event)) *streamParser {
	if emit == nil {
		emit = func(runtime.Event) {}
	}
	return &streamParser{emit: emit, now: time.Now, maxLine: MaxLineBytes}
}

// Write never fails, so that the copier keeps draining the command's output: a line over maxLine
// stops the parsing and is reported by outcome.
func (p *streamParser) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 && p.err == nil {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			i = len(b)
		}
		if len(p.partial)+i > p.maxLine {
			p.err = fmt.Errorf("claude-code: an output line over %d bytes: %w", p.maxLine, sandbox.ErrTooLarge)
			p.partial = nil
			break
		}
		if i == len(b) {
			p.partial = append(p.partial, b...)
			break
		}
		line := b[:i]
		if len(p.partial) > 0 {
			line = append(p.partial, line...)
		}
		p.lineLocked(line)
		p.partial = p.partial[:0]
		b = b[i+1:]
	}
	return n, nil
}

// flush parses a last line that had no newline.
func (p *streamParser) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil && len(bytes.TrimSpace(p.partial)) > 0 {
		p.lineLocked(p.partial)
	}
	p.partial = nil
}

func (p *streamParser) lineLocked(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var l line
	if err := json.Unmarshal(raw, &l); err != nil || l.Type == "" {
		if len(p.bad) < 20 {
			p.bad = append(p.bad, string(raw[:min(len(raw), 500)]))
		}
		return
	}
	switch l.Type {
	case "assistant":
		for _, b := range l.Message.Content {
			switch b.Type {
			case "text":
				if strings.TrimSpace(b.Text) == "" {
					continue
				}
				p.lastText = b.Text
				p.emit(runtime.Event{Kind: runtime.EventText, Text: b.Text, At: p.now()})
			case "tool_use":
				p.emit(runtime.Event{Kind: runtime.EventTool, Tool: b.Name, Text: toolSummary(b.Name, b.Input), At: p.now()})
			}
		}
	case "result":
		var r resultLine
		if err := json.Unmarshal(raw, &r); err == nil {
			p.result = &r
		}
	}
	// system (init, status), user (tool results) and stream_event lines carry nothing the chat shows.
}

// outcome returns the result line (nil if none came), the assistant's last text, the non-JSON
// lines, and an error wrapping sandbox.ErrTooLarge if a line was over the cap.
func (p *streamParser) outcome() (*resultLine, string, []string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.result, p.lastText, p.bad, p.err
}

// toolSummary renders a tool use in one short line: "Bash: ls -la", "Write: /workspace/a.txt".
func toolSummary(name string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	detail := ""
	// The argument that says most about each of Claude Code's tools; others take their first string.
	for _, k := range []string{"command", "file_path", "notebook_path", "pattern", "url", "query", "path", "description", "prompt"} {
		if s, ok := in[k].(string); ok && s != "" {
			detail = s
			break
		}
	}
	if detail == "" {
		for _, v := range in {
			if s, ok := v.(string); ok && s != "" {
				detail = s
				break
			}
		}
	}
	return summarize(name, detail)
}

// summarize joins a tool name and its detail on one line of at most 100 characters.
func summarize(name, detail string) string {
	detail = strings.Join(strings.Fields(detail), " ")
	if r := []rune(detail); len(r) > 100 {
		detail = string(r[:99]) + "…"
	}
	if detail == "" {
		return name
	}
	return fmt.Sprintf("%s: %s", name, detail)
}
