package claudecode

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/sandbox"
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

		res, lastText, bad, err := p.outcome()
		require.NoError(t, err)
		require.NotNil(t, res)
		require.Empty(t, bad)
		require.Equal(t, "DONE: wrote the file.", lastText)
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
	res, lastText, bad, err := p.outcome()
	require.NoError(t, err)
	require.Equal(t, []string{"No conversation found with session ID: x"}, bad)
	require.Empty(t, lastText, "blank text blocks are not progress")
	require.True(t, res.IsError)
	require.Equal(t, "The model API returned an error: 400 scripted failure", errorAnswer(res, lastText, ""))
	require.Equal(t, "The agent stopped: it reached its limit of turns.", errorAnswer(&resultLine{Subtype: "error_max_turns"}, "", ""))
	require.Equal(t, "The agent failed: boom", errorAnswer(&resultLine{Subtype: "error_during_execution"}, "", "x\nboom"))
	require.Equal(t, "The agent failed: last words", errorAnswer(&resultLine{Subtype: "error_during_execution"}, "last words", ""))
}

func TestParserLineCap(t *testing.T) {
	result := `{"type":"result","subtype":"success","result":"` + strings.Repeat("r", 40) + `"}`
	tests := []struct {
		name    string
		writes  []string
		wantErr bool
	}{
		{"a line of exactly the cap", []string{result + "\n"}, false},
		{"a line of exactly the cap, in pieces", []string{result[:10], result[10:30], result[30:] + "\n"}, false},
		{"the cap's last line without its newline", []string{result}, false},
		{"one byte over", []string{result + " \n"}, true},
		{"over, in pieces, never ending", []string{result[:30], result[30:], strings.Repeat("x", 1<<20)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newStreamParser(nil)
			p.maxLine = len(result)
			for _, w := range tt.writes {
				n, err := p.Write([]byte(w))
				require.NoError(t, err, "Write never fails: the command's output must keep draining")
				require.Equal(t, len(w), n)
			}
			if tt.wantErr {
				// Input after the overflow is drained, not parsed.
				_, _ = p.Write([]byte("\n" + `{"type":"assistant","message":{"content":[{"type":"text","text":"x"}]}}` + "\n"))
			}
			p.flush()
			res, lastText, _, err := p.outcome()
			if !tt.wantErr {
				require.NoError(t, err)
				require.NotNil(t, res)
				require.Equal(t, strings.Repeat("r", 40), res.Result)
				return
			}
			require.ErrorIs(t, err, sandbox.ErrTooLarge)
			require.Nil(t, res)
			require.Empty(t, lastText)
			require.Empty(t, p.partial, "nothing of the long line is kept")
		})
	}
}

// FuzzStreamParser feeds any output, cut anywhere, through the parser with a small line cap: it
// keeps at most one line's worth, keeps few noise lines, and either parses everything or reports
// the overlong line.
func FuzzStreamParser(f *testing.F) {
	sample, err := os.ReadFile("testdata/claude-out.jsonl")
	require.NoError(f, err)
	f.Add(sample, uint16(7), uint16(4096))
	f.Add([]byte(`{"type":"result","result":"x","is_error":true}`+"\nplain\n"), uint16(1), uint16(16))
	f.Add([]byte(`{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]}}`), uint16(3), uint16(64))
	f.Fuzz(func(t *testing.T, out []byte, chunk, maxLine uint16) {
		p := newStreamParser(func(e runtime.Event) {
			require.LessOrEqual(t, len(e.Text), len(out), "an event holds nothing the output did not")
		})
		p.maxLine = 1 + int(maxLine)
		step := 1 + int(chunk)%(len(out)+1)
		for rest := out; len(rest) > 0; {
			n := min(step, len(rest))
			w, err := p.Write(rest[:n])
			require.NoError(t, err)
			require.Equal(t, n, w)
			require.LessOrEqual(t, len(p.partial), p.maxLine)
			rest = rest[n:]
		}
		p.flush()
		res, lastText, bad, err := p.outcome()
		require.LessOrEqual(t, len(bad), 20)
		for _, b := range bad {
			require.LessOrEqual(t, len(b), 500)
		}
		longest := 0
		for _, l := range bytes.Split(out, []byte("\n")) {
			longest = max(longest, len(l))
		}
		if longest > p.maxLine {
			require.ErrorIs(t, err, sandbox.ErrTooLarge)
		} else {
			require.NoError(t, err)
		}
		if res != nil {
			require.LessOrEqual(t, len(res.Result), len(out))
		}
		require.LessOrEqual(t, len(lastText), len(out))
	})
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
