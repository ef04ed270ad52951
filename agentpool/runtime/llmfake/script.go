// Package llmfake is a scripted model server for tests. It speaks the three wire formats the agent
// runtimes use (OpenAI chat completions, Anthropic messages, OpenAI Responses), streaming and not,
// answers each call as its Script says (text, a tool call, an API error, or a reply that hangs until
// the client gives up) and records every request so that tests can assert on what the agent sent.
//
// Runtimes run inside sandboxes with network none, so the fake is also a small static binary
// (cmd/llmfake) that tests copy into the sandbox and start on its loopback; Client drives it from
// outside through any http.Client, typically one dialing through the sandbox provider.
package llmfake

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Script decides how each model call is answered. Rules are tried in order; the first one that
// matches and has uses left answers. Requests no rule matches get Default.
type Script struct {
	Rules []Rule `json:"rules,omitempty"`
	// Default answers everything else, such as title generation (nil: the text "OK").
	Default *Reply `json:"default,omitempty"`
}

// Rule is one scripted answer and when to give it. Zero-valued conditions match anything.
type Rule struct {
	// PromptContains matches when the newest user text of the request contains it. Tool results do
	// not count as user text, so a rule keeps matching through a turn's tool rounds.
	PromptContains string `json:"prompt_contains,omitempty"`
	// AfterTool, when set, matches on whether a tool result follows that newest user text: false for
	// the first call of a turn, true for the call after the tool ran.
	AfterTool *bool `json:"after_tool,omitempty"`
	// WithTools, when set, matches on whether the request offers tools (false: a runtime's side call,
	// such as a title or summary).
	WithTools *bool `json:"with_tools,omitempty"`
	// Times bounds how often the rule answers (0: no bound).
	Times int   `json:"times,omitempty"`
	Reply Reply `json:"reply"`
}

// Reply is what one call returns. Exactly one of Text, WriteFile, Tool and Error is used, in that
// order of precedence, except that Text may accompany a tool call as its preamble.
type Reply struct {
	Text string `json:"text,omitempty"`
	// WriteFile answers with a call of whichever file-writing tool the request offers ("write",
	// "Write", …), its argument names taken from the tool's schema, so one script serves every agent.
	WriteFile *WriteFile `json:"write_file,omitempty"`
	// Tool answers with a call of a named tool.
	Tool *ToolCall `json:"tool,omitempty"`
	// Error answers with an HTTP error in the API's error shape.
	Error *APIError `json:"error,omitempty"`
	// Hang sends the start of the reply (streaming: the first text delta), then holds the call open
	// until the client goes away: a turn that only an abort ends.
	Hang bool `json:"hang,omitempty"`
}

// WriteFile is a file the model asks the agent to write.
type WriteFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// ToolCall is a call of a named tool with its arguments.
type ToolCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// APIError is an error response. Use a status clients do not retry (400, 401, 403) to get a quick,
// final failure; 429 and 5xx make most runtimes back off and retry.
type APIError struct {
	Status  int    `json:"status"`
	Type    string `json:"type,omitempty"`
	Message string `json:"message"`
}

// Bool returns a pointer to b, for Rule's optional conditions.
func Bool(b bool) *bool { return &b }

// match returns the index of the rule answering req, or -1 for the default. used counts the answers
// each rule gave so far; the chosen rule's count is incremented.
func (s *Script) match(req *parsed, used []int) int {
	for i, r := range s.Rules {
		if r.Times > 0 && used[i] >= r.Times {
			continue
		}
		if r.PromptContains != "" && !strings.Contains(req.prompt, r.PromptContains) {
			continue
		}
		if r.AfterTool != nil && *r.AfterTool != req.afterTool {
			continue
		}
		if r.WithTools != nil && *r.WithTools != (len(req.tools) > 0) {
			continue
		}
		used[i]++
		return i
	}
	return -1
}

// reply returns the rule's reply, or the default.
func (s *Script) reply(i int) Reply {
	if i >= 0 {
		return s.Rules[i].Reply
	}
	if s.Default != nil {
		return *s.Default
	}
	return Reply{Text: "OK"}
}

// call is a reply resolved against the request: the tool call to make, if any, with its id.
type call struct {
	id   string
	name string
	args string
}

// resolveTool turns a WriteFile or Tool reply into a concrete call of a tool the request offers.
func resolveTool(rep Reply, req *parsed, id string) (*call, error) {
	switch {
	case rep.Tool != nil:
		args := string(rep.Tool.Args)
		if args == "" {
			args = "{}"
		}
		return &call{id: id, name: rep.Tool.Name, args: args}, nil
	case rep.WriteFile != nil:
		return writeCall(rep.WriteFile, req, id)
	}
	return nil, nil
}

// writeCall finds the request's file-writing tool. Agents name it and its arguments differently
// (opencode: write{filePath}, Claude Code: Write{file_path}); with none offered, a shell tool writes
// the file instead (codex: exec_command{cmd}; bash{command}).
func writeCall(w *WriteFile, req *parsed, id string) (*call, error) {
	for _, t := range req.tools {
		if !strings.EqualFold(t.name, "write") {
			continue
		}
		pathKey := "file_path"
		for _, k := range []string{"file_path", "filePath", "path"} {
			if t.params[k] {
				pathKey = k
				break
			}
		}
		args, _ := json.Marshal(map[string]string{pathKey: w.Path, "content": w.Content})
		return &call{id: id, name: t.name, args: string(args)}, nil
	}
	cmd := fmt.Sprintf("mkdir -p %s && printf '%%s' %s > %s", shellQuote(dirOf(w.Path)), shellQuote(w.Content), shellQuote(w.Path))
	for _, t := range req.tools {
		for _, k := range []string{"command", "cmd"} {
			if t.params[k] {
				args, _ := json.Marshal(map[string]string{k: cmd})
				return &call{id: id, name: t.name, args: string(args)}, nil
			}
		}
	}
	names := make([]string, len(req.tools))
	for i, t := range req.tools {
		names[i] = t.name
	}
	return nil, fmt.Errorf("llmfake: the script writes a file but the request offers no write or shell tool (tools: %s)", strings.Join(names, ", "))
}

func dirOf(p string) string {
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return "."
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// chunks splits text into a few deltas, so clients are exercised on reassembly.
func chunks(text string) []string {
	if text == "" {
		return nil
	}
	words := strings.SplitAfter(text, " ")
	n := max(1, (len(words)+2)/3)
	var out []string
	for i := 0; i < len(words); i += n {
		out = append(out, strings.Join(words[i:min(i+n, len(words))], ""))
	}
	return out
}
