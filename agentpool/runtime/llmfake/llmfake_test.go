package llmfake

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Request bodies in each format, as the agents send them: a prompt, optionally followed by a tool
// round, with the agent's write tool on offer.
const (
	chatBody = `{"model":"m","stream":%s,"messages":[{"role":"system","content":"sys"},
		{"role":"user","content":[{"type":"text","text":"please WRITE-IT"}]}%s],
		"tools":[{"type":"function","function":{"name":"write","parameters":{"properties":{"filePath":{},"content":{}}}}}]}`
	chatToolRound = `,{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"write","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"ok"}`
	messagesBody = `{"model":"claude","stream":%s,"system":"sys","messages":[
		{"role":"user","content":[{"type":"text","text":"please WRITE-IT"}]}%s],
		"tools":[{"name":"Write","input_schema":{"properties":{"file_path":{},"content":{}}}},{"name":"Bash","input_schema":{"properties":{"command":{}}}}]}`
	messagesToolRound = `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Write","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"done"},{"type":"text","text":"<system-reminder>x</system-reminder>"}]}`
	responsesBody = `{"model":"gpt","stream":%s,"instructions":"sys","input":[
		{"type":"message","role":"user","content":[{"type":"input_text","text":"please WRITE-IT"}]}%s],
		"tools":[{"type":"function","name":"exec_command","parameters":{"properties":{"cmd":{}}}},{"type":"web_search"}]}`
	responsesToolRound = `,{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{}"},
		{"type":"function_call_output","call_id":"call_1","output":"ok"}`
)

func writeScript() Script {
	return Script{Rules: []Rule{
		{PromptContains: "WRITE-IT", AfterTool: Bool(false), Reply: Reply{WriteFile: &WriteFile{Path: "/w/out/hello.txt", Content: "hi there"}}},
		{PromptContains: "WRITE-IT", AfterTool: Bool(true), Reply: Reply{Text: "I wrote the file for you."}},
	}}
}

type format struct {
	api       API
	path      string
	body      string
	toolRound string
}

var formats = []format{
	{APIChat, "/v1/chat/completions", chatBody, chatToolRound},
	{APIMessages, "/v1/messages", messagesBody, messagesToolRound},
	{APIResponses, "/v1/responses", responsesBody, responsesToolRound},
}

func body(f format, stream, afterTool bool) string {
	round := ""
	if afterTool {
		round = f.toolRound
	}
	return strings.Replace(strings.Replace(f.body, "%s", map[bool]string{true: "true", false: "false"}[stream], 1), "%s", round, 1)
}

// turn is what a client reassembles from one answer.
type turn struct {
	text     string
	toolName string
	toolArgs map[string]any
}

func TestFormatsToolThenText(t *testing.T) {
	for _, f := range formats {
		for _, stream := range []bool{false, true} {
			t.Run(string(f.api)+map[bool]string{true: "/stream", false: "/plain"}[stream], func(t *testing.T) {
				fake := New(writeScript())
				srv := httptest.NewServer(fake)
				t.Cleanup(srv.Close)

				got := post(t, srv.URL+f.path, body(f, stream, false), f.api, stream)
				require.NotEmpty(t, got.toolName, "first call answers with the write tool")
				switch f.api {
				case APIChat:
					require.Equal(t, turn{toolName: "write", toolArgs: map[string]any{"filePath": "/w/out/hello.txt", "content": "hi there"}}, got)
				case APIMessages:
					require.Equal(t, turn{toolName: "Write", toolArgs: map[string]any{"file_path": "/w/out/hello.txt", "content": "hi there"}}, got)
				case APIResponses:
					require.Equal(t, "exec_command", got.toolName, "no write tool: a shell tool writes the file")
					require.Equal(t, "mkdir -p '/w/out' && printf '%s' 'hi there' > '/w/out/hello.txt'", got.toolArgs["cmd"])
				}

				got = post(t, srv.URL+f.path, body(f, stream, true), f.api, stream)
				require.Equal(t, turn{text: "I wrote the file for you."}, got)

				reqs := fake.Requests()
				require.Len(t, reqs, 2)
				require.Equal(t, f.api, reqs[0].API)
				require.Equal(t, "please WRITE-IT", reqs[0].Prompt)
				require.False(t, reqs[0].AfterTool)
				require.True(t, reqs[1].AfterTool)
				require.Equal(t, []int{0, 1}, []int{reqs[0].Rule, reqs[1].Rule})
				require.Equal(t, stream, reqs[0].Stream)
			})
		}
	}
}

func TestScriptRules(t *testing.T) {
	s := Script{
		Rules: []Rule{
			{PromptContains: "once", Times: 1, Reply: Reply{Text: "first"}},
			{WithTools: Bool(false), Reply: Reply{Text: "a title"}},
		},
		Default: &Reply{Text: "default"},
	}
	used := make([]int, len(s.Rules))
	withTools := []tool{{name: "write"}}
	require.Equal(t, 0, s.match(&parsed{prompt: "do it once", tools: withTools}, used))
	require.Equal(t, -1, s.match(&parsed{prompt: "do it once", tools: withTools}, used), "Times bounds a rule")
	require.Equal(t, 1, s.match(&parsed{prompt: "name this"}, used))
	require.Equal(t, "default", s.reply(-1).Text)
	require.Equal(t, "OK", (&Script{}).reply(-1).Text)
}

func TestErrorShapes(t *testing.T) {
	fake := New(Script{Default: &Reply{Error: &APIError{Status: 401, Type: "authentication_error", Message: "bad key"}}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	for _, f := range formats {
		resp, err := http.Post(srv.URL+f.path, "application/json", strings.NewReader(body(f, true, false)))
		require.NoError(t, err)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		require.Equal(t, 401, resp.StatusCode)
		require.Equal(t, "bad key", e.Error.Message)
		require.Equal(t, "authentication_error", e.Error.Type)
		if f.api == APIMessages {
			require.Equal(t, "error", e.Type)
		}
	}
}

func TestNoWriteToolIsAnError(t *testing.T) {
	fake := New(Script{Default: &Reply{WriteFile: &WriteFile{Path: "/x", Content: "y"}}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"read"}}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestHangUntilClientGoes(t *testing.T) {
	fake := New(Script{Default: &Reply{Hang: true}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body(formats[1], true, false)))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	// The start of the reply arrives, then nothing until the client gives up.
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), "text_delta") {
	}
	cancel()
	resp.Body.Close()
	// The handler notices the client went away; Close waits for it.
	srv.Close()
	reqs := fake.Requests()
	require.Len(t, reqs, 1)
	require.True(t, reqs[0].Cancelled)
}

func TestControlAndUnknownPaths(t *testing.T) {
	fake := New(Script{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	c := &Client{URL: srv.URL}
	ctx := t.Context()
	require.NoError(t, c.Health(ctx))
	require.NoError(t, c.SetScript(ctx, Script{Default: &Reply{Text: "scripted"}}))
	resp, err := http.Head(srv.URL + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "Claude Code's HEAD / probe")
	got := post(t, srv.URL+"/chat/completions", body(formats[0], false, false), APIChat, false)
	require.Equal(t, "scripted", got.text, "a base URL without /v1 works too")
	reqs, err := c.Requests(ctx)
	require.NoError(t, err)
	require.Len(t, reqs, 2)
	require.Equal(t, "HEAD", reqs[0].Method)
	require.NoError(t, c.Reset(ctx))
	reqs, err = c.Requests(ctx)
	require.NoError(t, err)
	require.Empty(t, reqs)
}
