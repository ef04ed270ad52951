package gateway

import (
	"bytes"
	"encoding/json"
)

// Usage is what one model call cost, in tokens, as the upstream reported it.
type Usage struct {
	Input  int64
	Output int64
}

// Total is input plus output tokens: what budgets count.
func (u Usage) Total() int64 { return u.Input + u.Output }

// usageMeter follows one response as it streams past and finds its usage, in any of the three
// formats. It decodes only the events that carry usage, so the bytes pass at copy speed.
type usageMeter struct {
	api api
	// line holds a partial line across reads.
	line  []byte
	event string
	usage Usage
	seen  bool
	// events counts the data events that passed, for the estimate of a stream cut short.
	events int64
	// final is set by the event that closes the response's accounting.
	final bool
}

// feed parses a chunk of an SSE stream. It reports whether the chunk completed the accounting.
func (m *usageMeter) feed(p []byte) bool {
	wasFinal := m.final
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			m.line = append(m.line, p...)
			break
		}
		line := p[:i]
		if len(m.line) > 0 {
			line = append(m.line, line...)
			m.line = m.line[:0]
		}
		m.handleLine(bytes.TrimSuffix(line, []byte("\r")))
		p = p[i+1:]
	}
	// A line too long to be an event we read is dropped rather than kept growing.
	if len(m.line) > 8<<20 {
		m.line = m.line[:0]
	}
	return m.final && !wasFinal
}

func (m *usageMeter) handleLine(line []byte) {
	switch {
	case len(line) == 0:
		m.event = ""
	case bytes.HasPrefix(line, []byte("event:")):
		m.event = string(bytes.TrimSpace(line[len("event:"):]))
	case bytes.HasPrefix(line, []byte("data:")):
		data := bytes.TrimSpace(line[len("data:"):])
		if !bytes.Equal(data, []byte("[DONE]")) {
			m.events++
		}
		if bytes.Contains(data, []byte(`"usage"`)) {
			m.data(data)
		}
	}
}

// The usage fields of the three APIs. Anthropic counts cached input apart; it is input all the same.
type wireUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	PromptTokens             int64 `json:"prompt_tokens"`
	CompletionTokens         int64 `json:"completion_tokens"`
}

// maxCallTokens bounds each figure of one call: far over any real call, and small enough that no sum
// of them overflows the totals.
const maxCallTokens = 1 << 40

func (w *wireUsage) usage() Usage {
	return Usage{
		Input:  sumTokens(w.InputTokens, w.CacheCreationInputTokens, w.CacheReadInputTokens, w.PromptTokens),
		Output: sumTokens(w.OutputTokens, w.CompletionTokens),
	}
}

// sumTokens adds an answer's token figures, each taken as 0 to maxCallTokens: a negative one must
// not lower the budgets' totals, nor a huge one wrap them negative.
func sumTokens(figures ...int64) int64 {
	var n int64
	for _, f := range figures {
		n += min(max(f, 0), maxCallTokens)
	}
	return min(n, maxCallTokens)
}

// data handles one SSE data payload that mentions usage.
func (m *usageMeter) data(data []byte) {
	var ev struct {
		Type     string                      `json:"type"`
		Usage    *wireUsage                  `json:"usage"`
		Message  *struct{ Usage *wireUsage } `json:"message"`
		Response *struct{ Usage *wireUsage } `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch m.api {
	case apiMessages:
		// message_start carries the input (and a first output count); message_delta the cumulative
		// output, and sometimes the input again. The later figures win.
		switch {
		case ev.Type == "message_start" && ev.Message != nil && ev.Message.Usage != nil:
			m.usage, m.seen = ev.Message.Usage.usage(), true
		case ev.Type == "message_delta" && ev.Usage != nil:
			u := ev.Usage.usage()
			if u.Input > 0 {
				m.usage.Input = u.Input
			}
			m.usage.Output, m.seen, m.final = u.Output, true, true
		}
	case apiChat:
		// With stream_options.include_usage, the last chunk carries the usage.
		if ev.Usage != nil {
			m.usage, m.seen, m.final = ev.Usage.usage(), true, true
		}
	case apiResponses:
		if ev.Response != nil && ev.Response.Usage != nil {
			m.usage, m.seen = ev.Response.Usage.usage(), true
			m.final = m.final || ev.Type == "response.completed" || ev.Type == "response.incomplete" || ev.Type == "response.failed"
		}
	}
}

// cutShort is the usage of a stream that ended before its closing event: what it reported, the input
// it did not report estimated from the request's size (about four bytes a token), and the output at
// least one token per event.
func (m *usageMeter) cutShort(reqBytes int64) Usage {
	u := m.usage
	if !m.seen {
		u.Input = (reqBytes + 3) / 4
	}
	u.Output = max(u.Output, m.events)
	return u
}

// jsonUsage reads the usage of a whole (non-streamed) response body.
func jsonUsage(body []byte) (Usage, bool) {
	var r struct {
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return Usage{}, false
	}
	return r.Usage.usage(), true
}
