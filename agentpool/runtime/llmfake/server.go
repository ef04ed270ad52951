package llmfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ControlPrefix is where the fake's own endpoints live, apart from the model APIs.
const ControlPrefix = "/_llmfake/"

// Request is one recorded model call.
type Request struct {
	Seq    int         `json:"seq"`
	Time   time.Time   `json:"time"`
	API    API         `json:"api,omitempty"`
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
	// Body is the request as sent (valid JSON for model calls).
	Body   json.RawMessage `json:"body,omitempty"`
	Model  string          `json:"model,omitempty"`
	Stream bool            `json:"stream,omitempty"`
	// Prompt is the newest user text and AfterTool whether a tool result follows it.
	Prompt    string   `json:"prompt,omitempty"`
	AfterTool bool     `json:"after_tool,omitempty"`
	Tools     []string `json:"tools,omitempty"`
	// Rule is the index of the script rule that answered (-1: the default).
	Rule int `json:"rule"`
	// Cancelled: the client went away before the reply was complete.
	Cancelled bool `json:"cancelled,omitempty"`
}

// Server is the fake. It is an http.Handler, safe for concurrent use.
type Server struct {
	// closed ends hanging replies when the server shuts down.
	closed    chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex // protects the following
	script Script
	used   []int
	reqs   []*Request
}

// New returns a server answering with s.
func New(s Script) *Server {
	srv := &Server{closed: make(chan struct{})}
	srv.SetScript(s)
	return srv
}

// Close releases every hanging reply (an http.Server's Shutdown would otherwise wait for them).
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// SetScript replaces the script and resets its rules' use counts. Recorded requests are kept.
func (s *Server) SetScript(sc Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script, s.used = sc, make([]int, len(sc.Rules))
}

// Requests returns a copy of the recorded requests, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
	}
	return out
}

// Reset forgets the recorded requests.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = nil
}

// ServeHTTP routes model calls by path suffix, so any base URL prefix (/v1, none, …) works.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, ControlPrefix) {
		s.control(w, r)
		return
	}
	var api API
	switch {
	case r.Method != http.MethodPost:
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		api = APIChat
	case strings.HasSuffix(r.URL.Path, "/messages"):
		api = APIMessages
	case strings.HasSuffix(r.URL.Path, "/responses"):
		api = APIResponses
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	rec := &Request{Time: time.Now(), API: api, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Rule: -1}
	if api == "" {
		// Claude Code probes HEAD /; anything unknown is recorded (for debugging) and refused.
		s.record(rec)
		http.NotFound(w, r)
		return
	}
	rec.Body = json.RawMessage(body)
	p, err := parse(api, body)
	if err != nil {
		rec.Body = nil
		s.record(rec)
		writeError(w, api, APIError{Status: http.StatusBadRequest, Message: "llmfake: request body is not JSON: " + err.Error()})
		return
	}
	rec.Model, rec.Stream, rec.Prompt, rec.AfterTool = p.model, p.stream, p.prompt, p.afterTool
	for _, t := range p.tools {
		rec.Tools = append(rec.Tools, t.name)
	}
	s.mu.Lock()
	rec.Rule = s.script.match(p, s.used)
	rep := s.script.reply(rec.Rule)
	s.mu.Unlock()
	seq := s.record(rec)

	if rep.Error != nil {
		writeError(w, api, *rep.Error)
		return
	}
	c, err := resolveTool(rep, p, fmt.Sprintf("%s%d", toolIDPrefix(api), seq))
	if err != nil {
		writeError(w, api, APIError{Status: http.StatusBadRequest, Message: err.Error()})
		return
	}
	out := &reply{id: fmt.Sprintf("fake_%d", seq), model: p.model, text: rep.Text, call: c, hang: rep.Hang}
	var complete bool
	switch api {
	case APIChat:
		complete = s.writeChat(w, r, out, p.stream)
	case APIMessages:
		complete = s.writeMessages(w, r, out, p.stream)
	case APIResponses:
		complete = s.writeResponses(w, r, out, p.stream)
	}
	if !complete {
		s.mu.Lock()
		rec.Cancelled = true
		s.mu.Unlock()
	}
}

func (s *Server) record(r *Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Seq = len(s.reqs) + 1
	s.reqs = append(s.reqs, r)
	return r.Seq
}

// control serves the test's endpoints: GET requests, DELETE requests, PUT script, GET health.
func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	switch name := strings.TrimPrefix(r.URL.Path, ControlPrefix); {
	case name == "health":
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	case name == "requests" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.Requests())
	case name == "requests" && r.Method == http.MethodDelete:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	case name == "script" && r.Method == http.MethodPut:
		var sc Script
		if err := json.NewDecoder(r.Body).Decode(&sc); err != nil {
			http.Error(w, "script: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.SetScript(sc)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// reply is a resolved answer, rendered by each format's writer.
type reply struct {
	id, model, text string
	call            *call
	hang            bool
}

// Token counts every answer reports; clients compute cost from them.
const (
	inputTokens  = 10
	outputTokens = 5
)

func toolIDPrefix(api API) string {
	if api == APIMessages {
		return "toolu_"
	}
	return "call_"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError renders e in the API's error shape.
func writeError(w http.ResponseWriter, api API, e APIError) {
	if e.Status == 0 {
		e.Status = http.StatusBadRequest
	}
	if e.Type == "" {
		e.Type = "invalid_request_error"
	}
	if api == APIMessages {
		writeJSON(w, e.Status, map[string]any{"type": "error", "error": map[string]string{"type": e.Type, "message": e.Message}})
		return
	}
	writeJSON(w, e.Status, map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "code": nil}})
}

// sse writes server-sent events and flushes each one.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event; an empty name writes a bare data line (the chat completions style).
func (s *sse) event(name string, data any) {
	b, _ := json.Marshal(data)
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	if s.f != nil {
		s.f.Flush()
	}
}

// hang holds a reply open until the client goes away or the server closes. It reports false: the
// reply never completed.
func (s *Server) hang(r *http.Request) bool {
	select {
	case <-r.Context().Done():
	case <-s.closed:
	}
	return false
}
