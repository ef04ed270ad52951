package llmfake

import (
	"encoding/json"
	"strings"
)

// API names a wire format.
type API string

const (
	APIChat      API = "chat"      // OpenAI chat completions
	APIMessages  API = "messages"  // Anthropic messages
	APIResponses API = "responses" // OpenAI Responses
)

// parsed is the part of a request the script looks at, the same for every format.
type parsed struct {
	model  string
	stream bool
	// prompt is the newest user text; afterTool says whether a tool result follows it.
	prompt    string
	afterTool bool
	tools     []tool
}

type tool struct {
	name string
	// params are the top-level property names of the tool's argument schema.
	params map[string]bool
}

// item is one conversation entry reduced to what matters: user text, or a tool result.
type item struct {
	userText   string
	toolResult bool
}

func parse(api API, body []byte) (*parsed, error) {
	var raw struct {
		Model    string            `json:"model"`
		Stream   bool              `json:"stream"`
		Messages []json.RawMessage `json:"messages"`
		Input    json.RawMessage   `json:"input"`
		Tools    []struct {
			Name        string          `json:"name"`
			Parameters  json.RawMessage `json:"parameters"`
			InputSchema json.RawMessage `json:"input_schema"`
			Function    *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, err
	}
	p := &parsed{model: raw.Model, stream: raw.Stream}
	for _, t := range raw.Tools {
		name, schema := t.Name, t.Parameters
		if t.Function != nil {
			name, schema = t.Function.Name, t.Function.Parameters
		}
		if t.InputSchema != nil {
			schema = t.InputSchema
		}
		if name == "" {
			continue // hosted tools (web_search, …) have a type and no name
		}
		p.tools = append(p.tools, tool{name: name, params: schemaProps(schema)})
	}
	var items []item
	switch api {
	case APIResponses:
		items = responsesItems(raw.Input)
	default:
		for _, m := range raw.Messages {
			items = append(items, messageItems(m)...)
		}
	}
	for _, it := range items {
		if it.toolResult {
			p.afterTool = true
		} else {
			p.prompt, p.afterTool = it.userText, false
		}
	}
	return p, nil
}

func schemaProps(schema json.RawMessage) map[string]bool {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	props := make(map[string]bool, len(s.Properties))
	for k := range s.Properties {
		props[k] = true
	}
	return props
}

// messageItems reads a chat-completions or Anthropic message. Anthropic carries tool results as
// user content blocks; Claude Code adds reminder text blocks next to them, which must not count as
// a new prompt, so a message holding any tool result is a tool result.
func messageItems(m json.RawMessage) []item {
	var msg struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(m, &msg) != nil {
		return nil
	}
	switch msg.Role {
	case "tool":
		return []item{{toolResult: true}}
	case "user":
	default:
		return nil
	}
	var s string
	if json.Unmarshal(msg.Content, &s) == nil {
		return []item{{userText: s}}
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(msg.Content, &blocks) != nil {
		return nil
	}
	var text []string
	for _, b := range blocks {
		switch b.Type {
		case "tool_result":
			return []item{{toolResult: true}}
		case "text", "input_text":
			text = append(text, b.Text)
		}
	}
	if len(text) == 0 {
		return nil
	}
	return []item{{userText: strings.Join(text, "\n")}}
}

// responsesItems reads the Responses API input: a string, or items that are messages (typed or
// not) and function_call_output results.
func responsesItems(input json.RawMessage) []item {
	var s string
	if json.Unmarshal(input, &s) == nil {
		return []item{{userText: s}}
	}
	var list []json.RawMessage
	if json.Unmarshal(input, &list) != nil {
		return nil
	}
	var out []item
	for _, raw := range list {
		var it struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(raw, &it)
		switch it.Type {
		case "function_call_output", "custom_tool_call_output":
			out = append(out, item{toolResult: true})
		case "message", "":
			out = append(out, messageItems(raw)...)
		}
	}
	return out
}
