package opencode

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/internal/sse"
	"github.com/threadbox/threadbox/sandbox"
)

// testdata/oc-events.txt is opencode 1.18.33's /event stream for a turn that wrote a file with its
// write tool and answered (../shared/reference/samples/).
func TestEventsSample(t *testing.T) {
	f, err := os.Open("testdata/oc-events.txt")
	require.NoError(t, err)
	defer f.Close()
	var events []runtime.Event
	turn := newTurnState("ses_dff00f75dffeUw1QQcpCxvVUCV", func(e runtime.Event) { events = append(events, e) })
	other := newTurnState("ses_someone_else", func(e runtime.Event) { require.Fail(t, "event of another session", "%+v", e) })
	rd := sse.NewReader(f, 0)
	n := 0
	for {
		data, err := rd.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		var ev event
		require.NoError(t, json.Unmarshal(data.Data, &ev))
		if n == 0 {
			require.Equal(t, "server.connected", ev.Type)
		}
		n++
		turn.handle(ev)
		other.handle(ev)
		if turn.idle {
			break
		}
	}
	require.True(t, turn.idle, "session.idle ends the turn")
	require.True(t, turn.busy)
	require.Nil(t, turn.err)
	require.Len(t, events, 3)
	require.Equal(t, runtime.EventTool, events[0].Kind)
	require.Equal(t, "write", events[0].Tool)
	require.Equal(t, "write: /workspace/hello.txt", events[0].Text)
	var text strings.Builder
	for _, e := range events[1:] {
		require.Equal(t, runtime.EventText, e.Kind)
		text.WriteString(e.Text)
	}
	require.Equal(t, "DONE: wrote the file.", text.String(), "the deltas make up the answer")
}

func TestEventsErrorsRetriesAndRequests(t *testing.T) {
	var events []runtime.Event
	turn := newTurnState("s1", func(e runtime.Event) { events = append(events, e) })
	for _, raw := range []string{
		`{"type":"session.status","properties":{"sessionID":"s1","status":{"type":"retry","attempt":1,"message":"overloaded"}}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"s1","part":{"id":"r1","sessionID":"s1","type":"reasoning"}}}`,
		`{"type":"message.part.delta","properties":{"sessionID":"s1","partID":"r1","field":"text","delta":"thinking…"}}`,
		`{"type":"permission.asked","properties":{"id":"per_1","sessionID":"s1","permission":"external_directory"}}`,
		`{"type":"question.asked","properties":{"id":"que_1","sessionID":"s1"}}`,
		`{"type":"message.updated","properties":{"sessionID":"s1","info":{"role":"assistant","error":{"name":"APIError","data":{"message":"scripted failure","statusCode":400}}}}}`,
		`{"type":"session.status","properties":{"sessionID":"s1","status":{"type":"idle"}}}`,
	} {
		var ev event
		require.NoError(t, json.Unmarshal([]byte(raw), &ev))
		turn.handle(ev)
	}
	require.Len(t, events, 1, "reasoning deltas are not the answer")
	require.Equal(t, runtime.EventStatus, events[0].Kind)
	require.Contains(t, events[0].Text, "overloaded")
	require.Equal(t, []string{"per_1"}, turn.permissions)
	require.Equal(t, []string{"que_1"}, turn.questions)
	require.False(t, turn.idle, "idle before busy is not the end of this turn")
	require.Equal(t, "The model API returned an error (HTTP 400): scripted failure", turn.err.userMessage())
	require.Equal(t, "The agent failed: MessageAbortedError", (&apiError{Name: "MessageAbortedError"}).userMessage())
}

func TestOutcome(t *testing.T) {
	var msgs []message
	require.NoError(t, json.Unmarshal([]byte(`[
		{"info":{"role":"user"},"parts":[{"type":"text","text":"old question"}]},
		{"info":{"role":"assistant","cost":1},"parts":[{"type":"text","text":"old answer"}]},
		{"info":{"role":"user"},"parts":[{"type":"text","text":"write it"}]},
		{"info":{"role":"assistant","cost":0.25,"tokens":{"input":10,"output":5,"cache":{"read":2}},"time":{"created":1000,"completed":1500}},
		 "parts":[{"type":"text","text":"I'll write it."},{"type":"tool","tool":"write"}]},
		{"info":{"role":"assistant","cost":0.5,"tokens":{"input":20,"output":7},"time":{"created":1600,"completed":3000}},
		 "parts":[{"type":"step-start"},{"type":"text","text":"Done: "},{"type":"text","text":"wrote it."}]}
	]`), &msgs))
	answer, usage, apiErr, took := outcome(msgs)
	require.Equal(t, "Done: wrote it.", answer, "the last assistant message of the turn")
	require.Equal(t, runtime.Usage{InputTokens: 32, OutputTokens: 12, CostUSD: 0.75}, usage)
	require.Nil(t, apiErr)
	require.Equal(t, int64(2000), took.Milliseconds())
}

func TestConfigContent(t *testing.T) {
	m := Model{API: APIAnthropic, Name: "claude-sonnet-4-5", BaseURL: "http://127.0.0.1:1/v1/", APIKey: "sk-secret"}
	content, err := ConfigContent(m)
	require.NoError(t, err)
	require.NotContains(t, content, "sk-secret", "the key travels in the environment, not in the config")
	var cfg struct {
		Provider map[string]struct {
			NPM     string         `json:"npm"`
			Options map[string]any `json:"options"`
		} `json:"provider"`
		Model      string            `json:"model"`
		SmallModel string            `json:"small_model"`
		Permission map[string]string `json:"permission"`
	}
	require.NoError(t, json.Unmarshal([]byte(content), &cfg))
	require.Equal(t, "@ai-sdk/anthropic", cfg.Provider["threadbox"].NPM)
	require.Equal(t, "http://127.0.0.1:1/v1", cfg.Provider["threadbox"].Options["baseURL"])
	require.Equal(t, "{env:"+ModelKeyEnv+"}", cfg.Provider["threadbox"].Options["apiKey"])
	require.Equal(t, "threadbox/claude-sonnet-4-5", cfg.Model)
	require.Equal(t, cfg.Model, cfg.SmallModel, "no call ever goes to a built-in provider")
	require.Equal(t, "allow", cfg.Permission["external_directory"])

	env, err := Env(m)
	require.NoError(t, err)
	require.Equal(t, "sk-secret", env[ModelKeyEnv])
	require.NotContains(t, m.String(), "sk-secret")

	_, err = ConfigContent(Model{Name: "x", API: "cohere"})
	require.Error(t, err)
	_, err = New(Config{Model: m})
	require.ErrorContains(t, err, "secret")
}

func TestPassword(t *testing.T) {
	a := Password("secret", "sandbox-1")
	require.Len(t, a, 64)
	require.Equal(t, a, Password("secret", "sandbox-1"), "derived, so nothing is stored")
	require.NotEqual(t, a, Password("secret", "sandbox-2"))
	require.NotEqual(t, a, Password("other", "sandbox-1"))
}

// FuzzEvents runs any byte stream through the /event reader and a turn: the reader fails only with
// the stream's end or an event over its cap, events of other sessions are ignored, and every tool
// line stays one short line.
func FuzzEvents(f *testing.F) {
	sample, err := os.ReadFile("testdata/oc-events.txt")
	require.NoError(f, err)
	f.Add(sample)
	f.Add([]byte(`data: {"type":"message.part.updated","properties":{"part":{"id":"p","sessionID":"ses_a","type":"tool","tool":"bash","callID":"c","state":{"status":"running","input":{"command":"ls"}}}}}` + "\n\n"))
	f.Add([]byte(`data: {"type":"session.status","properties":{"sessionID":"ses_a","status":{"type":"retry","message":"busy"}}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		turn := newTurnState("ses_a", func(e runtime.Event) {
			if e.Kind == runtime.EventTool {
				require.LessOrEqual(t, utf8.RuneCountInString(e.Text), utf8.RuneCountInString(e.Tool)+2+100)
				require.NotContains(t, strings.TrimPrefix(e.Text, e.Tool), "\n")
			}
		})
		// ses_b is never named (not even through a \u escape): its turn must not move.
		otherNamed := bytes.Contains(stream, []byte("ses_b")) || bytes.Contains(stream, []byte(`\u`))
		other := newTurnState("ses_b", func(e runtime.Event) { require.True(t, otherNamed, "event of another session: %+v", e) })
		rd := sse.NewReader(bytes.NewReader(stream), 0)
		for range len(stream) + 1 {
			data, err := rd.Next()
			if err != nil {
				require.True(t, errors.Is(err, io.EOF) || errors.Is(err, sandbox.ErrTooLarge), "stream error %v", err)
				if !otherNamed {
					require.False(t, other.busy || other.idle || other.err != nil || len(other.permissions)+len(other.questions) > 0)
				}
				return
			}
			var ev event
			if json.Unmarshal(data.Data, &ev) != nil {
				continue
			}
			turn.handle(ev)
			other.handle(ev)
		}
		require.Fail(t, "more events than bytes")
	})
}

// FuzzOutcome reads any message list as GET /session/{id}/message returns it: the answer is text
// the list held, never more.
func FuzzOutcome(f *testing.F) {
	f.Add([]byte(`[{"info":{"role":"user"}},{"info":{"role":"assistant","time":{"created":1,"completed":5}},"parts":[{"type":"text","text":"hi"}]}]`))
	f.Add([]byte(`[{"info":{"role":"assistant","error":{"name":"APIError","data":{"message":"x","statusCode":500}}}}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var msgs []message
		if json.Unmarshal(body, &msgs) != nil {
			return
		}
		answer, _, apiErr, took := outcome(msgs)
		require.LessOrEqual(t, len(answer), len(body))
		require.GreaterOrEqual(t, took, time.Duration(0))
		if apiErr != nil {
			require.NotEmpty(t, apiErr.userMessage())
		}
	})
}

// A server that streams endless distinct parts (or ids as long as an event) does not grow what the
// turn remembers past its bounds; parts within them still stream their text.
func TestTurnStateRemembersBoundedParts(t *testing.T) {
	var texts []string
	turn := newTurnState("ses_a", func(e runtime.Event) {
		if e.Kind == runtime.EventText {
			texts = append(texts, e.Text)
		}
	})
	send := func(typ string, props map[string]any) {
		raw, err := json.Marshal(props)
		require.NoError(t, err)
		turn.handle(event{Type: typ, Properties: raw})
	}
	send("message.part.updated", map[string]any{"part": map[string]any{"id": "prt_text", "sessionID": "ses_a", "type": "text"}})
	long := strings.Repeat("x", 4*maxPartID)
	for i := range 3 * maxParts {
		id := long + string(rune('a'+i%26)) + strings.Repeat("y", i%7)
		if i%2 == 0 {
			id = "prt_" + strings.Repeat("z", i%50) + string(rune(i))
		}
		send("message.part.updated", map[string]any{"part": map[string]any{"id": id, "sessionID": "ses_a", "type": "tool",
			"tool": "bash", "callID": id, "state": map[string]any{"status": "running"}}})
	}
	require.LessOrEqual(t, len(turn.partTypes), maxParts)
	require.LessOrEqual(t, len(turn.toolShown), maxToolsShown)
	for id := range turn.partTypes {
		require.LessOrEqual(t, len(id), maxPartID)
	}
	send("message.part.delta", map[string]any{"sessionID": "ses_a", "partID": "prt_text", "field": "text", "delta": "hello"})
	require.Equal(t, []string{"hello"}, texts, "a part remembered before the flood still streams")
}

// TestOutcomeUsageIsBounded: the messages' numbers come from the server in the sandbox.
func TestOutcomeUsageIsBounded(t *testing.T) {
	var msgs []message
	require.NoError(t, json.Unmarshal([]byte(`[
		{"info":{"role":"user"}},
		{"info":{"role":"assistant","cost":-5,"tokens":{"input":-10,"output":9223372036854775807,"cache":{"read":9223372036854775807}}}},
		{"info":{"role":"assistant","cost":0.5,"tokens":{"input":20,"output":7}}}
	]`), &msgs))
	_, usage, _, _ := outcome(msgs)
	require.Equal(t, runtime.Usage{InputTokens: runtime.MaxUsageTokens, OutputTokens: runtime.MaxUsageTokens, CostUSD: 0.5}, usage)
}
