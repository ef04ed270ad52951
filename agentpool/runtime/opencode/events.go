package opencode

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// event is one item of opencode's /event stream: `data: {"id","type","properties"}` with no event line.
type event struct {
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
}

// turnState follows one session's events during a turn and reports progress.
type turnState struct {
	sessionID string
	emit      func(runtime.Event)
	now       func() time.Time

	busy bool
	// idle is set by an idle event seen after busy: the turn's end.
	idle bool
	// unseenSince is when a resumption first found no sign of the run (not busy, no answer of its
	// own), which it then has startGrace to give.
	unseenSince time.Time
	// partTypes remembers each part's type, so that text deltas of reasoning parts are not shown
	// as the answer.
	partTypes map[string]string
	// toolShown lists the tool calls already reported (by call id).
	toolShown map[string]bool
	// permissions are permission requests to approve (the config should make them unnecessary, but
	// an unanswered one hangs the turn), questions the ones to reject (nobody is there to answer).
	permissions, questions []string
	// err is the last error the session reported (session.error, or an assistant message's error).
	err *apiError
}

// apiError is opencode's error object: {name, data:{message, statusCode, …}}.
type apiError struct {
	Name string `json:"name"`
	Data struct {
		Message    string `json:"message"`
		StatusCode int    `json:"statusCode"`
		ProviderID string `json:"providerID"`
	} `json:"data"`
}

func newTurnState(sessionID string, emit func(runtime.Event)) *turnState {
	if emit == nil {
		emit = func(runtime.Event) {}
	}
	return &turnState{sessionID: sessionID, emit: emit, now: time.Now, partTypes: map[string]string{}, toolShown: map[string]bool{}}
}

type part struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionID"`
	Type      string `json:"type"`
	Text      string `json:"text"`
	Tool      string `json:"tool"`
	CallID    string `json:"callID"`
	State     struct {
		Status string          `json:"status"`
		Input  json.RawMessage `json:"input"`
		Title  string          `json:"title"`
		Error  string          `json:"error"`
	} `json:"state"`
}

// handle applies one event. Events of other sessions are ignored.
func (t *turnState) handle(ev event) {
	var p struct {
		SessionID string `json:"sessionID"`
		Status    struct{ Type, Message string }
		Part      *part           `json:"part"`
		PartID    string          `json:"partID"`
		Field     string          `json:"field"`
		Delta     string          `json:"delta"`
		Info      json.RawMessage `json:"info"`
		Error     *apiError       `json:"error"`
		ID        string          `json:"id"`
	}
	if err := json.Unmarshal(ev.Properties, &p); err != nil {
		return
	}
	if p.SessionID == "" && p.Part != nil {
		p.SessionID = p.Part.SessionID
	}
	if p.SessionID != t.sessionID {
		return
	}
	switch ev.Type {
	case "session.status":
		switch p.Status.Type {
		case "busy":
			t.busy = true
		case "idle":
			if t.busy {
				t.idle = true
			}
		case "retry":
			t.emit(runtime.Event{Kind: runtime.EventStatus, Text: "model API busy, retrying: " + p.Status.Message, At: t.now()})
		}
	case "session.idle":
		// Only after our prompt made the session busy: the stream opens before the prompt is sent,
		// so an idle from before it (a previous turn's, an abort's) would end this turn unanswered.
		if t.busy {
			t.idle = true
		}
	case "session.error":
		if p.Error != nil {
			t.err = p.Error
		}
	case "message.updated":
		var info struct {
			Role  string    `json:"role"`
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(p.Info, &info) == nil && info.Role == "assistant" && info.Error != nil {
			t.err = info.Error
		}
	case "message.part.updated":
		if p.Part != nil {
			t.part(*p.Part)
		}
	case "message.part.delta":
		if p.Field == "text" && p.Delta != "" && t.partTypes[p.PartID] == "text" {
			t.emit(runtime.Event{Kind: runtime.EventText, Text: p.Delta, At: t.now()})
		}
	case "permission.asked":
		t.permissions = append(t.permissions, p.ID)
	case "question.asked":
		t.questions = append(t.questions, p.ID)
	}
}

// Bounds on what a turn remembers of the server's parts: the stream is outside input, and a part
// id is bounded only by the event size. opencode's ids are about 30 characters; a turn has at most
// hundreds of parts. Past the bounds a part is not remembered: its text deltas are not streamed as
// progress (the answer is read from the session's messages at the end), a tool call may be reported
// twice.
const (
	maxPartID     = 128
	maxParts      = 4096
	maxToolsShown = 4096
)

func (t *turnState) part(p part) {
	if _, known := t.partTypes[p.ID]; known || (len(p.ID) <= maxPartID && len(t.partTypes) < maxParts) {
		t.partTypes[p.ID] = p.Type
	}
	if p.Type != "tool" || t.toolShown[p.CallID] {
		return
	}
	// A tool is reported once, as soon as it runs (its input is complete by then).
	switch p.State.Status {
	case "running", "completed", "error":
		if len(p.CallID) <= maxPartID && len(t.toolShown) < maxToolsShown {
			t.toolShown[p.CallID] = true
		}
		t.emit(runtime.Event{Kind: runtime.EventTool, Tool: p.Tool, Text: toolSummary(p.Tool, p.State.Input, p.State.Title), At: t.now()})
	}
}

// toolSummary renders a tool call in one short line: "bash: ls -la", "write: /workspace/a.txt".
func toolSummary(name string, input json.RawMessage, title string) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	detail := ""
	for _, k := range []string{"command", "filePath", "path", "pattern", "url", "query", "description"} {
		if s, ok := in[k].(string); ok && s != "" {
			detail = s
			break
		}
	}
	if detail == "" {
		detail = title
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

// message is one entry of GET /session/{id}/message.
type message struct {
	Info struct {
		ID     string    `json:"id"`
		Role   string    `json:"role"`
		Finish string    `json:"finish"`
		Error  *apiError `json:"error"`
		Cost   float64   `json:"cost"`
		Tokens struct {
			Input  int64 `json:"input"`
			Output int64 `json:"output"`
			Cache  struct {
				Read  int64 `json:"read"`
				Write int64 `json:"write"`
			} `json:"cache"`
		} `json:"tokens"`
		Time struct {
			Created   int64 `json:"created"`
			Completed int64 `json:"completed"`
		} `json:"time"`
	} `json:"info"`
	Parts []part `json:"parts"`
}

// outcome computes a turn's result from the session's newest messages: the assistant messages after
// the last user message are this turn's; the answer is the last one's text.
func outcome(msgs []message) (answer string, usage runtime.Usage, apiErr *apiError, took time.Duration) {
	start := 0
	for i, m := range msgs {
		if m.Info.Role == "user" {
			start = i + 1
		}
	}
	var first, last int64
	for _, m := range msgs[start:] {
		if m.Info.Role != "assistant" {
			continue
		}
		// The numbers come from the server in the sandbox: summed without going negative or overflowing.
		usage.InputTokens = runtime.SumTokens(usage.InputTokens, m.Info.Tokens.Input, m.Info.Tokens.Cache.Read, m.Info.Tokens.Cache.Write)
		usage.OutputTokens = runtime.SumTokens(usage.OutputTokens, m.Info.Tokens.Output)
		usage.CostUSD = runtime.SumCost(usage.CostUSD, m.Info.Cost)
		if m.Info.Error != nil {
			apiErr = m.Info.Error
		}
		if first == 0 {
			first = m.Info.Time.Created
		}
		last = max(last, m.Info.Time.Completed)
		var text []string
		for _, p := range m.Parts {
			if p.Type == "text" && strings.TrimSpace(p.Text) != "" {
				text = append(text, p.Text)
			}
		}
		if len(text) > 0 {
			answer = strings.Join(text, "")
		}
	}
	if first > 0 && last > first {
		took = time.Duration(last-first) * time.Millisecond
	}
	return answer, usage, apiErr, took
}

// userMessage turns an opencode error into what the chat shows.
func (e *apiError) userMessage() string {
	msg := e.Data.Message
	if msg == "" {
		msg = e.Name
	}
	switch e.Name {
	case "APIError", "ProviderAuthError":
		if e.Data.StatusCode != 0 {
			return fmt.Sprintf("The model API returned an error (HTTP %d): %s", e.Data.StatusCode, msg)
		}
		return "The model API returned an error: " + msg
	case "MessageOutputLengthError":
		return "The agent stopped: the model's answer was longer than its output limit."
	}
	return "The agent failed: " + msg
}
