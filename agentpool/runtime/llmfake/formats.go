package llmfake

import (
	"encoding/json"
	"net/http"
)

// The writers below follow the sequences in ../shared/reference/agent-runtimes.md §5, which the real
// opencode, Claude Code and codex binaries accepted. Each returns false when the reply was cut short
// (a hanging reply ended by the client).

// hangText is streamed before a hanging reply stalls, so that the runtime reports the turn as busy.
const hangText = "Working on it…"

func (r *reply) firstText() string {
	if r.text == "" && r.hang {
		return hangText
	}
	return r.text
}

// writeChat renders an OpenAI chat completion.
func (s *Server) writeChat(w http.ResponseWriter, req *http.Request, r *reply, stream bool) bool {
	finish := "stop"
	if r.call != nil {
		finish = "tool_calls"
	}
	usage := map[string]int{"prompt_tokens": inputTokens, "completion_tokens": outputTokens, "total_tokens": inputTokens + outputTokens}
	if !stream {
		if r.hang {
			return s.hang(req)
		}
		msg := map[string]any{"role": "assistant", "content": nil}
		if r.text != "" {
			msg["content"] = r.text
		}
		if r.call != nil {
			msg["tool_calls"] = []any{map[string]any{"id": r.call.id, "type": "function",
				"function": map[string]string{"name": r.call.name, "arguments": r.call.args}}}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": r.id, "object": "chat.completion", "created": 0, "model": r.model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   usage,
		})
		return true
	}
	e := startSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": r.id, "object": "chat.completion.chunk", "created": 0, "model": r.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	e.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for i, t := range chunks(r.firstText()) {
		e.event("", chunk(map[string]any{"content": t}, nil))
		if i == 0 && r.hang {
			return s.hang(req)
		}
	}
	if r.call != nil {
		e.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": r.call.id, "type": "function",
			"function": map[string]string{"name": r.call.name, "arguments": ""}}}}, nil))
		e.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0,
			"function": map[string]string{"arguments": r.call.args}}}}, nil))
	}
	e.event("", chunk(map[string]any{}, finish))
	e.event("", map[string]any{"id": r.id, "object": "chat.completion.chunk", "created": 0, "model": r.model,
		"choices": []any{}, "usage": usage})
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	return true
}

// writeMessages renders an Anthropic message.
func (s *Server) writeMessages(w http.ResponseWriter, req *http.Request, r *reply, stream bool) bool {
	stop := "end_turn"
	if r.call != nil {
		stop = "tool_use"
	}
	var content []any
	if r.text != "" {
		content = append(content, map[string]any{"type": "text", "text": r.text})
	}
	if r.call != nil {
		content = append(content, map[string]any{"type": "tool_use", "id": r.call.id, "name": r.call.name,
			"input": json.RawMessage(r.call.args)})
	}
	if !stream {
		if r.hang {
			return s.hang(req)
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": r.id, "type": "message", "role": "assistant", "model": r.model, "content": content,
			"stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": inputTokens, "output_tokens": outputTokens},
		})
		return true
	}
	e := startSSE(w)
	ev := func(name string, data map[string]any) {
		data["type"] = name
		e.event(name, data)
	}
	ev("message_start", map[string]any{"message": map[string]any{
		"id": r.id, "type": "message", "role": "assistant", "model": r.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": inputTokens, "output_tokens": 1}}})
	index := 0
	if text := r.firstText(); text != "" {
		ev("content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		for i, t := range chunks(text) {
			ev("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "text_delta", "text": t}})
			if i == 0 && r.hang {
				return s.hang(req)
			}
		}
		ev("content_block_stop", map[string]any{"index": index})
		index++
	}
	if r.call != nil {
		ev("content_block_start", map[string]any{"index": index, "content_block": map[string]any{
			"type": "tool_use", "id": r.call.id, "name": r.call.name, "input": map[string]any{}}})
		ev("content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": r.call.args}})
		ev("content_block_stop", map[string]any{"index": index})
	}
	ev("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": outputTokens}})
	ev("message_stop", map[string]any{})
	return true
}

// writeResponses renders an OpenAI Responses result.
func (s *Server) writeResponses(w http.ResponseWriter, req *http.Request, r *reply, stream bool) bool {
	var output []any
	msgItem := func(text, status string) map[string]any {
		return map[string]any{"type": "message", "id": r.id + "_msg", "status": status, "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
	}
	callItem := func(args, status string) map[string]any {
		return map[string]any{"type": "function_call", "id": r.id + "_fc", "call_id": r.call.id, "name": r.call.name,
			"arguments": args, "status": status}
	}
	if r.text != "" {
		output = append(output, msgItem(r.text, "completed"))
	}
	if r.call != nil {
		output = append(output, callItem(r.call.args, "completed"))
	}
	resp := func(status string, out []any) map[string]any {
		m := map[string]any{"id": r.id, "object": "response", "created_at": 0, "status": status, "model": r.model, "output": out}
		if status == "completed" {
			m["usage"] = map[string]int{"input_tokens": inputTokens, "output_tokens": outputTokens, "total_tokens": inputTokens + outputTokens}
		}
		return m
	}
	if !stream {
		if r.hang {
			return s.hang(req)
		}
		writeJSON(w, http.StatusOK, resp("completed", output))
		return true
	}
	e := startSSE(w)
	seq := 0
	ev := func(name string, data map[string]any) {
		data["type"], data["sequence_number"] = name, seq
		seq++
		e.event(name, data)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{})})
	index := 0
	if text := r.firstText(); text != "" {
		ev("response.output_item.added", map[string]any{"output_index": index, "item": map[string]any{
			"type": "message", "id": r.id + "_msg", "status": "in_progress", "role": "assistant", "content": []any{}}})
		part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
		ev("response.content_part.added", map[string]any{"item_id": r.id + "_msg", "output_index": index, "content_index": 0, "part": part})
		for i, t := range chunks(text) {
			ev("response.output_text.delta", map[string]any{"item_id": r.id + "_msg", "output_index": index, "content_index": 0, "delta": t})
			if i == 0 && r.hang {
				return s.hang(req)
			}
		}
		ev("response.output_text.done", map[string]any{"item_id": r.id + "_msg", "output_index": index, "content_index": 0, "text": text})
		ev("response.content_part.done", map[string]any{"item_id": r.id + "_msg", "output_index": index, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		ev("response.output_item.done", map[string]any{"output_index": index, "item": msgItem(text, "completed")})
		index++
	}
	if r.call != nil {
		ev("response.output_item.added", map[string]any{"output_index": index, "item": callItem("", "in_progress")})
		ev("response.function_call_arguments.delta", map[string]any{"item_id": r.id + "_fc", "output_index": index, "delta": r.call.args})
		ev("response.function_call_arguments.done", map[string]any{"item_id": r.id + "_fc", "output_index": index, "arguments": r.call.args})
		ev("response.output_item.done", map[string]any{"output_index": index, "item": callItem(r.call.args, "completed")})
	}
	ev("response.completed", map[string]any{"response": resp("completed", output)})
	return true
}
