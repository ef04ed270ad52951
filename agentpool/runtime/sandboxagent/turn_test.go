package sandboxagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
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

	// A late chunk of an earlier message is progress, not a new answer.
	turn.handle(json.RawMessage(`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":" late"}}}`))
	require.Equal(t, "Done.", turn.answer())
	turn.handle(json.RawMessage(`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","messageId":"m2","content":{"type":"text","text":" Really."}}}`))
	require.Equal(t, "Done. Really.", turn.answer())
}

func chunkUpdate(msg, text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"sessionId": "s", "update": map[string]any{
		"sessionUpdate": "agent_message_chunk", "messageId": msg, "content": map[string]string{"type": "text", "text": text}}})
	return b
}

func TestAnswerCap(t *testing.T) {
	tests := []struct {
		name    string
		chunks  [][2]string // message id, text
		want    string
		wantErr bool
	}{
		{"exactly the cap", [][2]string{{"m1", "12345"}, {"m1", "67890"}}, "1234567890", false},
		{"one byte over", [][2]string{{"m1", "12345"}, {"m1", "678901"}}, "12345", true},
		{"earlier messages do not count", [][2]string{{"m1", "1234567890"}, {"m2", "abcdefghij"}}, "abcdefghij", false},
		{"nothing taken after the overflow", [][2]string{{"m1", "12345678901"}, {"m2", "a"}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var streamed strings.Builder
			turn := newTurnState("s", func(e runtime.Event) { streamed.WriteString(e.Text) })
			turn.maxAnswer = 10
			var all strings.Builder
			for _, c := range tt.chunks {
				turn.handle(chunkUpdate(c[0], c[1]))
				all.WriteString(c[1])
			}
			require.Equal(t, tt.want, turn.answer())
			require.Equal(t, all.String(), streamed.String(), "progress still shows every chunk")
			if tt.wantErr {
				require.ErrorIs(t, turn.err, sandbox.ErrTooLarge)
			} else {
				require.NoError(t, turn.err)
			}
		})
	}
}

// FuzzStream runs any byte stream through the ACP stream reader and a turn: frames come out until
// the stream ends, the reader fails only with the stream's end or an event over its cap, and the
// answer never outgrows its bound.
func FuzzStream(f *testing.F) {
	for _, file := range []string{"testdata/sa-sse.txt", "testdata/sa-claude-sse.txt"} {
		b, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("id: 1\ndata: " + string(chunkUpdate("m1", "hello")) + "\n\n"))
	f.Add([]byte("id: 2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":" + string(chunkUpdate("m1", "0123456789abcdef")) + "}\n\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s := &stream{c: make(chan frame), cancel: func() {}, done: make(chan struct{})}
		go s.pump(t.Context(), io.NopCloser(bytes.NewReader(raw)))
		turn := newTurnState("s", nil)
		turn.maxAnswer = 16
		n := 0
		for fr := range s.c {
			n++
			require.LessOrEqual(t, n, len(raw), "more frames than bytes")
			switch fr.msg.Method {
			case "session/update":
				turn.handle(fr.msg.Params)
			case "session/request_permission":
				o := allowOutcome(fr.msg.Params)
				require.Contains(t, []string{"selected", "cancelled"}, o["outcome"])
			}
			require.LessOrEqual(t, len(turn.answer()), 16)
		}
		<-s.done
		err := s.err()
		require.True(t, errors.Is(err, io.EOF) || errors.Is(err, sandbox.ErrTooLarge), "stream error %v", err)
		if turn.err != nil {
			require.ErrorIs(t, turn.err, sandbox.ErrTooLarge)
		}
	})
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

// An agent that streams endless distinct messages and tool calls (or ids as long as an event) does
// not grow what the turn remembers past its bounds; the answer is still the last message.
func TestTurnStateRemembersBoundedIDs(t *testing.T) {
	tools := 0
	turn := newTurnState("s", func(e runtime.Event) {
		if e.Kind == runtime.EventTool {
			tools++
		}
	})
	long := strings.Repeat("x", 4*maxTrackedID)
	for i := range 3 * maxTracked {
		id := fmt.Sprintf("%d", i)
		if i%2 == 0 {
			id = long + id
		}
		b, err := json.Marshal(map[string]any{"sessionId": "s", "update": map[string]any{
			"sessionUpdate": "tool_call", "toolCallId": id, "title": "bash", "status": "in_progress"}})
		require.NoError(t, err)
		turn.handle(b)
		turn.handle(chunkUpdate(id, "t"))
	}
	require.Equal(t, 3*maxTracked, tools, "every distinct call is reported")
	require.LessOrEqual(t, len(turn.tools), maxTracked)
	require.LessOrEqual(t, len(turn.past), maxTracked)
	for id := range turn.tools {
		require.LessOrEqual(t, len(id), maxTrackedID)
	}
	for id := range turn.past {
		require.LessOrEqual(t, len(id), maxTrackedID)
	}
	turn.handle(chunkUpdate("last", "answer"))
	require.Equal(t, "answer", turn.answer())
}
