package sandboxagent

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
)

// turnState follows one session's updates during a prompt and reports progress.
type turnState struct {
	sessionID string
	emit      func(runtime.Event)
	now       func() time.Time

	// msgID and text are the newest agent message's id and text, the answer: text before a tool
	// call is progress, not the answer. Older messages are not kept; past marks their ids, so that a
	// late chunk of one is not taken for a new message.
	msgID string
	text  strings.Builder
	past  map[string]bool
	// maxAnswer bounds text (runtime.MaxAnswerBytes); err is set once the answer outgrew it.
	maxAnswer int
	err       error
	tools     map[string]bool
	costUSD   float64
	usageSet  bool
}

// Bounds on the ids a turn remembers: the stream is outside input, and an id is bounded only by the
// event size. ACP ids are tens of characters; a turn has at most hundreds of messages and calls.
// Past the bounds an id is not remembered: a tool call may be reported twice, and a late chunk of an
// older message taken for a new one.
const (
	maxTrackedID = 128
	maxTracked   = 4096
)

// remember adds id to m within the bounds.
func remember(m map[string]bool, id string) {
	if len(id) <= maxTrackedID && len(m) < maxTracked {
		m[id] = true
	}
}

func newTurnState(sessionID string, emit func(runtime.Event)) *turnState {
	if emit == nil {
		emit = func(runtime.Event) {}
	}
	return &turnState{sessionID: sessionID, emit: emit, now: time.Now, past: map[string]bool{}, tools: map[string]bool{},
		maxAnswer: runtime.MaxAnswerBytes}
}

// update is the part of a session/update notification's params.update that matters here.
type update struct {
	SessionUpdate string `json:"sessionUpdate"`
	Content       json.RawMessage
	MessageID     string          `json:"messageId"`
	ToolCallID    string          `json:"toolCallId"`
	Title         string          `json:"title"`
	Kind          string          `json:"kind"`
	Status        string          `json:"status"`
	RawInput      json.RawMessage `json:"rawInput"`
	Cost          *struct {
		Amount   float64 `json:"amount"`
		Currency string  `json:"currency"`
	} `json:"cost"`
}

// handle applies a session/update notification's params; other sessions' updates are ignored.
func (t *turnState) handle(params json.RawMessage) {
	var p struct {
		SessionID string `json:"sessionId"`
		Update    update `json:"update"`
	}
	if json.Unmarshal(params, &p) != nil || p.SessionID != t.sessionID {
		return
	}
	u := p.Update
	switch u.SessionUpdate {
	case "agent_message_chunk":
		var c struct{ Type, Text string }
		if json.Unmarshal(u.Content, &c) != nil || c.Type != "text" || c.Text == "" {
			return
		}
		t.emit(runtime.Event{Kind: runtime.EventText, Text: c.Text, At: t.now()})
		switch {
		case t.past[u.MessageID]:
			return // an older message's: progress only
		case u.MessageID != t.msgID || t.text.Len() == 0:
			if t.text.Len() > 0 {
				remember(t.past, t.msgID)
			}
			t.msgID = u.MessageID
			t.text.Reset()
		}
		if t.err != nil {
			return
		}
		if t.text.Len()+len(c.Text) > t.maxAnswer {
			t.err = fmt.Errorf("sandbox-agent: the answer is over %d bytes: %w", t.maxAnswer, sandbox.ErrTooLarge)
			return
		}
		t.text.WriteString(c.Text)
	case "tool_call", "tool_call_update":
		// The first notice of a call has no input yet; report it once its input is known or it runs.
		if t.tools[u.ToolCallID] || (!hasInput(u.RawInput) && u.Status != "in_progress" && u.Status != "completed" && u.Status != "failed") {
			return
		}
		remember(t.tools, u.ToolCallID)
		name := u.Title
		if name == "" {
			name = u.Kind
		}
		t.emit(runtime.Event{Kind: runtime.EventTool, Tool: name, Text: toolSummary(name, u.RawInput), At: t.now()})
	case "usage_update":
		if u.Cost != nil && strings.EqualFold(u.Cost.Currency, "USD") {
			t.costUSD, t.usageSet = u.Cost.Amount, true
		}
	}
}

func hasInput(raw json.RawMessage) bool {
	var m map[string]any
	return json.Unmarshal(raw, &m) == nil && len(m) > 0
}

// answer is the text of the turn's last agent message.
func (t *turnState) answer() string { return t.text.String() }

// toolSummary renders a tool call in one short line: "write: /workspace/a.txt".
func toolSummary(name string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	detail := ""
	for _, k := range []string{"command", "filePath", "file_path", "path", "pattern", "url", "query", "description"} {
		if s, ok := in[k].(string); ok && s != "" {
			detail = s
			break
		}
	}
	detail = strings.Join(strings.Fields(detail), " ")
	if r := []rune(detail); len(r) > 100 {
		detail = string(r[:99]) + "…"
	}
	if detail == "" {
		return name
	}
	return fmt.Sprintf("%s: %s", name, detail)
}

// promptResult is session/prompt's result.
type promptResult struct {
	StopReason string `json:"stopReason"`
	Usage      struct {
		InputTokens  int64 `json:"inputTokens"`
		OutputTokens int64 `json:"outputTokens"`
	} `json:"usage"`
}

// stopMessage explains a turn that ended for another reason than finishing.
func stopMessage(reason string) string {
	switch reason {
	case "max_tokens":
		return "The agent stopped: the model's answer was longer than its output limit."
	case "max_turn_requests":
		return "The agent stopped: it reached its limit of model requests for one turn."
	case "refusal":
		return "The model refused to continue."
	case "cancelled":
		return "The turn was cancelled."
	}
	return "The agent stopped: " + reason
}

// errorAnswer turns a session/prompt error into what the chat shows.
func errorAnswer(e *rpcError) string {
	msg := strings.TrimSpace(strings.TrimPrefix(e.Message, "Internal error:"))
	if e.Data.ErrorName == "APIError" || e.Data.ErrorName == "ProviderAuthError" {
		return "The model API returned an error: " + msg
	}
	return "The agent failed: " + msg
}
