package llmfake

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// post sends body and reassembles the answer the way a client of that API would, checking the
// framing on the way (event names matching data types, [DONE], complete responses).
func post(t *testing.T, url, body string, api API, stream bool) turn {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	if !stream {
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return decodePlain(t, api, b)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var (
		out     turn
		args    strings.Builder
		event   string
		done    bool
		sawStop bool
	)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = name
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &m), data)
		switch api {
		case APIChat:
			choices := m["choices"].([]any)
			if len(choices) == 0 {
				require.NotNil(t, m["usage"])
				continue
			}
			c := choices[0].(map[string]any)
			delta := c["delta"].(map[string]any)
			if s, ok := delta["content"].(string); ok {
				out.text += s
			}
			if calls, ok := delta["tool_calls"].([]any); ok {
				fn := calls[0].(map[string]any)["function"].(map[string]any)
				if n, ok := fn["name"].(string); ok {
					out.toolName = n
				}
				args.WriteString(fn["arguments"].(string))
			}
			if c["finish_reason"] != nil {
				sawStop = true
			}
		case APIMessages:
			require.Equal(t, event, m["type"], "event name and data type agree")
			switch event {
			case "content_block_start":
				if cb := m["content_block"].(map[string]any); cb["type"] == "tool_use" {
					out.toolName = cb["name"].(string)
				}
			case "content_block_delta":
				d := m["delta"].(map[string]any)
				if d["type"] == "text_delta" {
					out.text += d["text"].(string)
				} else {
					args.WriteString(d["partial_json"].(string))
				}
			case "message_stop":
				sawStop = true
			}
		case APIResponses:
			require.Equal(t, event, m["type"], "event name and data type agree")
			switch event {
			case "response.output_text.delta":
				out.text += m["delta"].(string)
			case "response.output_item.done":
				if item := m["item"].(map[string]any); item["type"] == "function_call" {
					out.toolName = item["name"].(string)
					args.WriteString(item["arguments"].(string))
				}
			case "response.completed":
				sawStop = true
			}
		}
	}
	require.NoError(t, sc.Err())
	require.True(t, sawStop, "the stream ends properly")
	require.Equal(t, api == APIChat, done, "only chat completions end with [DONE]")
	if args.Len() > 0 {
		require.NoError(t, json.Unmarshal([]byte(args.String()), &out.toolArgs))
	}
	return out
}

func decodePlain(t *testing.T, api API, b []byte) turn {
	var out turn
	var args string
	switch api {
	case APIChat:
		var r struct {
			Choices []struct {
				Message struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct{ Name, Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		m := r.Choices[0].Message
		if m.Content != nil {
			out.text = *m.Content
		}
		if len(m.ToolCalls) > 0 {
			out.toolName, args = m.ToolCalls[0].Function.Name, m.ToolCalls[0].Function.Arguments
		}
	case APIMessages:
		var r struct {
			Content []struct {
				Type, Text, Name string
				Input            json.RawMessage
			} `json:"content"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		for _, c := range r.Content {
			if c.Type == "text" {
				out.text += c.Text
			} else {
				out.toolName, args = c.Name, string(c.Input)
			}
		}
	case APIResponses:
		var r struct {
			Output []struct {
				Type, Name, Arguments string
				Content               []struct{ Text string } `json:"content"`
			} `json:"output"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		for _, o := range r.Output {
			if o.Type == "message" {
				out.text += o.Content[0].Text
			} else {
				out.toolName, args = o.Name, o.Arguments
			}
		}
	}
	if args != "" {
		require.NoError(t, json.Unmarshal([]byte(args), &out.toolArgs))
	}
	return out
}
