package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUsageMeter: each format's stream yields its usage, however the bytes are split, and reports
// the moment the closing event arrives.
func TestUsageMeter(t *testing.T) {
	tests := []struct {
		name   string
		api    api
		stream string
		want   Usage
	}{
		{"anthropic", apiMessages, "event: message_start\n" +
			`data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"cache_read_input_tokens":3,"output_tokens":1}}}` + "\n\n" +
			"event: content_block_delta\n" + `data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"the usage"}}` + "\n\n" +
			"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}` + "\n\n" +
			"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n",
			Usage{Input: 13, Output: 5}},
		{"openai chat", apiChat, `data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n" +
			`data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}` + "\r\n\r\n" +
			"data: [DONE]\n\n",
			Usage{Input: 10, Output: 5}},
		{"openai responses", apiResponses, "event: response.created\n" +
			`data: {"type":"response.created","response":{"usage":null}}` + "\n\n" +
			"event: response.completed\n" + `data: {"type":"response.completed","response":{"usage":{"input_tokens":10,"output_tokens":5}}}` + "\n\n",
			Usage{Input: 10, Output: 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{1, 7, 64, len(tc.stream)} {
				m := usageMeter{api: tc.api}
				finals := 0
				for i := 0; i < len(tc.stream); i += size {
					if m.feed([]byte(tc.stream[i:min(i+size, len(tc.stream))])) {
						finals++
					}
				}
				require.Equal(t, tc.want, m.usage, "chunks of %d", size)
				require.Equal(t, 1, finals, "the closing event is reported once (chunks of %d)", size)
			}
		})
	}
}

// TestJSONUsage: whole answers of each format.
func TestJSONUsage(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Usage
		ok   bool
	}{
		{"anthropic", `{"content":[],"usage":{"input_tokens":10,"cache_creation_input_tokens":2,"output_tokens":5}}`, Usage{12, 5}, true},
		{"chat", `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}`, Usage{10, 5}, true},
		{"responses", `{"output":[],"usage":{"input_tokens":10,"output_tokens":5}}`, Usage{10, 5}, true},
		{"none", `{"data":[]}`, Usage{}, false},
		{"not json", `oops`, Usage{}, false},
		// An answer's figures cannot lower the totals, nor overflow them.
		{"negative", `{"usage":{"input_tokens":-1000000,"output_tokens":5}}`, Usage{0, 5}, true},
		{"huge", `{"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807,"output_tokens":9223372036854775807}}`, Usage{maxCallTokens, maxCallTokens}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, ok := jsonUsage([]byte(tc.body))
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, u)
		})
	}
}
