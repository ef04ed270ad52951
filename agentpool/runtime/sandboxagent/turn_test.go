package sandboxagent

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// readFrames runs the stream reader over a recorded SSE file.
func readFrames(t *testing.T, path string) []frame {
	f, err := os.Open(path)
	require.NoError(t, err)
	s := &stream{c: make(chan frame, 1024), cancel: func() {}, done: make(chan struct{})}
	s.pump(t.Context(), f)
	var out []frame
	for fr := range s.c {
		out = append(out, fr)
	}
	return out
}

// The samples are sandbox-agent 0.4.2's ACP event streams for a turn that wrote a file and answered,
// with the opencode agent and with the claude agent (../shared/reference/samples/).
func TestTurnOnSamples(t *testing.T) {
	for _, tc := range []struct {
		file, tool, answer string
		cost               float64
	}{
		{"testdata/sa-sse.txt", "write: /workspace/hello.txt", "DONE: wrote the file.", 0},
		{"testdata/sa-claude-sse.txt", "Write hello.txt: /workspace/hello.txt", "DONE: wrote the file.", 0.00021},
	} {
		t.Run(tc.file, func(t *testing.T) {
			frames := readFrames(t, tc.file)
			require.NotEmpty(t, frames)
			require.Equal(t, "1", frames[0].id, "sequence ids are kept for Last-Event-ID")
			var sid string
			for _, f := range frames {
				var p struct {
					SessionID string                         `json:"sessionId"`
					Update    struct{ SessionUpdate string } `json:"update"`
				}
				if f.msg.Method == "session/update" && json.Unmarshal(f.msg.Params, &p) == nil && p.Update.SessionUpdate == "tool_call" {
					sid = p.SessionID
				}
			}
			require.NotEmpty(t, sid)
			var events []runtime.Event
			turn := newTurnState(sid, func(e runtime.Event) { events = append(events, e) })
			var final *message
			for _, f := range frames {
				if f.msg.Method == "session/update" {
					turn.handle(f.msg.Params)
				}
				if f.msg.Method == "" && strings.Contains(string(f.msg.Result), "stopReason") {
					final = &f.msg
				}
			}
			require.NotNil(t, final)
			var pr promptResult
			require.NoError(t, json.Unmarshal(final.Result, &pr))
			require.Equal(t, "end_turn", pr.StopReason)
			require.Equal(t, tc.answer, turn.answer())
			require.InDelta(t, tc.cost, turn.costUSD, 1e-9)
			require.Equal(t, runtime.EventTool, events[0].Kind)
			require.Equal(t, tc.tool, events[0].Text)
			var text strings.Builder
			tools := 0
			for _, e := range events {
				if e.Kind == runtime.EventText {
					text.WriteString(e.Text)
				} else {
					tools++
				}
			}
			require.Equal(t, 1, tools, "a tool call is reported once")
			require.Equal(t, tc.answer, text.String())
		})
	}
}

func TestAnswerIsLastMessage(t *testing.T) {
	turn := newTurnState("s", nil)
	for _, u := range []string{
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"Let me write it."}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"tool_call","toolCallId":"c1","title":"bash","status":"pending","rawInput":{}}}`,
		`{"sessionId":"other","update":{"sessionUpdate":"agent_message_chunk","messageId":"m9","content":{"type":"text","text":"not ours"}}}`,
		`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","messageId":"m2","content":{"type":"text","text":"Done."}}}`,
	} {
		turn.handle(json.RawMessage(u))
	}
	require.Equal(t, "Done.", turn.answer())
	require.Empty(t, turn.tools, "a pending call without input is not reported yet")
}

func TestErrorsAndOutcomes(t *testing.T) {
	e := &rpcError{Code: -32603, Message: "Internal error: scripted failure"}
	e.Data.ErrorName = "APIError"
	require.Equal(t, "The model API returned an error: scripted failure", errorAnswer(e))
	require.Equal(t, "The agent failed: boom", errorAnswer(&rpcError{Message: "boom"}))
	require.Equal(t, "The model refused to continue.", stopMessage("refusal"))
	require.Equal(t, map[string]string{"outcome": "selected", "optionId": "yes"},
		allowOutcome(json.RawMessage(`{"options":[{"optionId":"no","kind":"reject_once"},{"optionId":"once","kind":"allow_once"},{"optionId":"yes","kind":"allow_always"}]}`)))
	require.Equal(t, map[string]string{"outcome": "cancelled"}, allowOutcome(json.RawMessage(`{"options":[]}`)))
	require.Len(t, Token("s", "sb"), 64)
	require.NotEqual(t, Token("s", "sb"), Token("s", "sb2"))
	_, err := New(Config{Secret: "x", Agent: "claude"})
	require.ErrorContains(t, err, "not installed")
}
