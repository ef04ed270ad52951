package claudecode

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
)

// testdata/claude-out.jsonl is real output of Claude Code 2.1.330 for a turn that wrote a file with
// its Write tool (../shared/reference/samples/).
func TestParserOnSample(t *testing.T) {
	sample, err := os.ReadFile("testdata/claude-out.jsonl")
	require.NoError(t, err)
	// Feed it in awkward pieces: the exec copier splits lines anywhere.
	for _, size := range []int{1, 7, 512, len(sample)} {
		var events []runtime.Event
		p := newStreamParser(func(e runtime.Event) { events = append(events, e) })
		for rest := sample; len(rest) > 0; {
			n := min(size, len(rest))
			_, _ = p.Write(rest[:n])
			rest = rest[n:]
		}
		p.flush()
		require.Len(t, events, 2, "chunk size %d", size)
		require.Equal(t, runtime.EventTool, events[0].Kind)
		require.Equal(t, "Write", events[0].Tool)
		require.Equal(t, "Write: /workspace/hello.txt", events[0].Text)
		require.Equal(t, runtime.Event{Kind: runtime.EventText, Text: "DONE: wrote the file.", At: events[1].At}, events[1])

		res, texts, bad := p.outcome()
		require.NotNil(t, res)
		require.Empty(t, bad)
		require.Equal(t, []string{"DONE: wrote the file."}, texts)
		require.Equal(t, "DONE: wrote the file.", res.Result)
		require.False(t, res.IsError)
		require.Equal(t, "success", res.Subtype)
		require.Equal(t, "e7d55e7b-e65c-461c-abe3-e44ba8c6df40", res.SessionID)
		require.Positive(t, res.DurationMS)
	}
}

func TestParserErrorsAndNoise(t *testing.T) {
	p := newStreamParser(nil)
	_, _ = p.Write([]byte("No conversation found with session ID: x\n"))
	_, _ = p.Write([]byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"  "}]}}` + "\n"))
	_, _ = p.Write([]byte(`{"type":"result","subtype":"success","is_error":true,"result":"API Error: 400 scripted failure","api_error_status":400,"total_cost_usd":0.5}`))
	p.flush()
	res, texts, bad := p.outcome()
	require.Equal(t, []string{"No conversation found with session ID: x"}, bad)
	require.Empty(t, texts, "blank text blocks are not progress")
	require.True(t, res.IsError)
	require.Equal(t, "The model API returned an error: 400 scripted failure", errorAnswer(res, texts, ""))
	require.Equal(t, "The agent stopped: it reached its limit of turns.", errorAnswer(&resultLine{Subtype: "error_max_turns"}, nil, ""))
	require.Equal(t, "The agent failed: boom", errorAnswer(&resultLine{Subtype: "error_during_execution"}, nil, "x\nboom"))
}

func TestToolSummary(t *testing.T) {
	require.Equal(t, "Bash: ls -la /tmp", toolSummary("Bash", []byte(`{"command":"ls   -la\n/tmp","description":"list"}`)))
	require.Equal(t, "Grep: TODO", toolSummary("Grep", []byte(`{"pattern":"TODO","path":"."}`)))
	require.Equal(t, "TodoWrite", toolSummary("TodoWrite", []byte(`{"todos":[]}`)))
	long := toolSummary("Bash", []byte(`{"command":"echo `+strings.Repeat("x", 300)+`"}`))
	require.LessOrEqual(t, len([]rune(long)), len("Bash: ")+100)
}

func TestConfigStringRedactsKey(t *testing.T) {
	s := Config{Model: "m", APIKey: "sk-secret"}.String()
	require.NotContains(t, s, "sk-secret")
	require.Contains(t, s, "[redacted]")
}

func TestNewUUID(t *testing.T) {
	id := newUUID()
	require.Regexp(t, sessionIDPattern, id)
	require.NotEqual(t, id, newUUID())
}
