package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/db"
)

// api is the wire format of a call.
type api int

const (
	apiMessages api = iota + 1
	apiChat
	apiResponses
	apiOther // models listings, token counts: proxied, nothing to meter
)

// family is the upstream a path prefix selects.
type family int

const (
	familyAnthropic family = iota + 1
	familyOpenAI
)

// call is one authorized model call, carried in the request context to the proxy's hooks.
type call struct {
	family family
	api    api
	path   string // upstream path below the upstream URL
	thread string
	turnID int64
	// model is the request's model id, read only when there is a price table.
	model string
	// reqBytes is the request body's size, for the estimate of a stream cut before its usage.
	reqBytes int64
}

// route maps a gateway path to its upstream and format. Only model calls and model listings pass: the
// real key must not open the rest of the account (files, batches, fine-tuning, admin). The path must
// be clean (no dot or empty segments) and a model id one segment: the upstream resolves
// /v1/models/../files to its /v1/files.
func route(p string) (family, api, string, bool) {
	if path.Clean(p) != p {
		return 0, 0, "", false
	}
	switch {
	case strings.HasPrefix(p, AnthropicPath+"/"):
		rest := strings.TrimPrefix(p, AnthropicPath)
		switch {
		case rest == "/v1/messages":
			return familyAnthropic, apiMessages, rest, true
		case rest == "/v1/messages/count_tokens", rest == "/v1/models", modelPath(rest, "/v1/models/"):
			return familyAnthropic, apiOther, rest, true
		}
	case strings.HasPrefix(p, OpenAIPath+"/"):
		rest := strings.TrimPrefix(p, OpenAIPath)
		switch {
		case rest == "/chat/completions":
			return familyOpenAI, apiChat, rest, true
		case rest == "/responses":
			return familyOpenAI, apiResponses, rest, true
		case rest == "/models", modelPath(rest, "/models/"):
			return familyOpenAI, apiOther, rest, true
		}
	}
	return 0, 0, "", false
}

// apiMethod is the one method a routed path is served for: the same paths with other methods are not
// model calls (OpenAI's DELETE /v1/models/{id} deletes a fine-tuned model of the account, GET
// /v1/chat/completions lists every stored completion of it). Calls and token counts are POSTs, model
// listings GETs.
func apiMethod(kind api, upPath string) string {
	if kind == apiOther && upPath != "/v1/messages/count_tokens" {
		return http.MethodGet
	}
	return http.MethodPost
}

// modelPath says whether p is prefix followed by one model id.
func modelPath(p, prefix string) bool {
	id, ok := strings.CutPrefix(p, prefix)
	return ok && id != "" && !strings.Contains(id, "/")
}

// maxRequestBody bounds a request body the gateway reads (see bufferBody), and maxJSONBody a
// whole response it reads for its usage.
const maxRequestBody = 64 << 20

// maxJSONBody is a var for the test of an answer past it.
var maxJSONBody int64 = 32 << 20

// errAnswerTooLarge is an upstream answer past maxJSONBody: refused whole rather than cut, since a
// cut JSON answer reaches the agent as a parse error about nothing it did.
var errAnswerTooLarge = errors.New("the model API's answer is over the gateway's limit")

// ServeHTTP implements http.Handler: authorize, check the budgets, proxy.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if (r.Method == http.MethodHead || r.Method == http.MethodGet) && (r.URL.Path == AnthropicPath || r.URL.Path == AnthropicPath+"/" || r.URL.Path == "/") {
		// Claude Code probes its base URL before the first call.
		w.WriteHeader(http.StatusOK)
		return
	}
	fam, kind, upPath, ok := route(r.URL.Path)
	if !ok {
		writeError(w, fam, http.StatusNotFound, "not_found_error", "threadbox gateway: "+r.URL.Path+" is not a model API the gateway serves")
		return
	}
	if want := apiMethod(kind, upPath); r.Method != want {
		w.Header().Set("Allow", want)
		writeError(w, fam, http.StatusMethodNotAllowed, "invalid_request_error",
			"threadbox gateway: "+r.Method+" "+r.URL.Path+" is not a model API the gateway serves (use "+want+")")
		return
	}
	if (fam == familyAnthropic && g.cfg.AnthropicKey == "") || (fam == familyOpenAI && g.cfg.OpenAIKey == "") {
		writeError(w, fam, http.StatusForbidden, "permission_error", "threadbox gateway: the bot has no key for this API (set ANTHROPIC_API_KEY or OPENAI_API_KEY in the bot's environment)")
		return
	}
	c := &call{family: fam, api: kind, path: upPath}
	status, errType, err := g.authorize(r, c)
	if err != nil {
		var be *BudgetError
		if errors.As(err, &be) {
			g.noteRefusal(c.thread, be)
		}
		g.log.Info("model call refused", zap.String("thread", c.thread), zap.Int("status", status), zap.Error(err))
		msg := err.Error()
		if status >= 500 {
			// The store's error names the database (its address, its SQL), and the agent prints what
			// it gets: the detail stays in the log.
			msg = "the bot could not check this call just now (its database did not answer); try again"
		}
		writeError(w, fam, status, errType, "threadbox gateway: "+msg)
		return
	}
	if !g.enter(c.thread) {
		writeError(w, fam, http.StatusTooManyRequests, "rate_limit_error",
			fmt.Sprintf("threadbox gateway: this thread has %d model calls in flight already", maxCallsPerThread))
		return
	}
	defer g.leave(c.thread)
	if err := bufferBody(r, c, g.cfg.Prices != nil); err != nil {
		writeError(w, fam, http.StatusBadRequest, "invalid_request_error", "threadbox gateway: "+err.Error())
		return
	}
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxCall, c)))
}

// maxCallsPerThread bounds one thread's model calls in flight. Each may buffer a request body of up
// to maxRequestBody in the bot: without a bound, one agent opening calls in parallel could take the
// bot's memory. Agents make a few at once (subagents); this leaves them room.
const maxCallsPerThread = 16

// enter takes one of the thread's call slots, or reports false when all are taken.
func (g *Gateway) enter(thread string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[thread] >= maxCallsPerThread {
		return false
	}
	g.inFlight[thread]++
	return true
}

func (g *Gateway) leave(thread string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[thread]--; g.inFlight[thread] <= 0 {
		delete(g.inFlight, thread)
	}
}

// authorize checks the token, that it is the current generation of a live session (and of the socket
// it came in on), that a turn runs in its thread, and the budgets. It returns the status to answer
// with on refusal.
func (g *Gateway) authorize(r *http.Request, c *call) (int, string, error) {
	tok := r.Header.Get("X-Api-Key")
	if tok == "" {
		tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	thread, gen, err := ParseToken(g.cfg.Secret, strings.TrimSpace(tok))
	if err != nil {
		return http.StatusUnauthorized, "authentication_error", err
	}
	c.thread = thread
	if conn, ok := r.Context().Value(ctxConnIdent).(ident); ok && conn != (ident{Thread: thread, Gen: gen}) {
		return http.StatusUnauthorized, "authentication_error", errors.New("the token belongs to another sandbox")
	}
	ctx := r.Context()
	sess, err := g.store.SessionGet(ctx, thread)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return http.StatusUnauthorized, "authentication_error", errors.New("token revoked: the thread has no session")
	case err != nil:
		return http.StatusServiceUnavailable, "api_error", fmt.Errorf("checking the token: %w", err)
	case sess.Generation != gen || !liveStatus(sess.Status):
		return http.StatusUnauthorized, "authentication_error", fmt.Errorf("token revoked: its sandbox (generation %d) was destroyed or replaced", gen)
	}
	if public, _ := ctx.Value(ctxPublic).(bool); public && !g.callsOverNetwork(sess) {
		// A Docker sandbox's token is good on its own socket only: one the agent leaked (printed in
		// its answer) opens nothing from the internet.
		return http.StatusUnauthorized, "authentication_error", errors.New("this token's sandbox reaches the gateway through its socket, not over the network")
	}
	turn, err := g.store.TurnGetRunning(ctx, thread)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return http.StatusConflict, "invalid_request_error", errors.New("no turn is running in this thread; model calls are allowed only during a turn")
	case err != nil:
		return http.StatusServiceUnavailable, "api_error", fmt.Errorf("finding the running turn: %w", err)
	}
	c.turnID = turn.ID
	if err := g.checkBudget(ctx, thread, turn.UserID); err != nil {
		var be *BudgetError
		if errors.As(err, &be) {
			return http.StatusForbidden, "permission_error", err
		}
		return http.StatusServiceUnavailable, "api_error", err
	}
	return 0, "", nil
}

// liveStatus: a sandbox in these states may be running a turn.
func liveStatus(s db.SessionStatus) bool {
	switch s {
	case db.SessionCreating, db.SessionActive, db.SessionResuming:
		return true
	}
	return false
}

// bufferBody reads the request body whole before it goes upstream. A model call's JSON is useless to
// the upstream until complete, so this costs nothing; and streaming the incoming body through to the
// upstream cut about one streamed answer in a thousand under load (the upstream connection was
// closed mid-answer), which a whole body does not. A model call's body must also be one the gateway
// can meter (see meterable). With wantModel it notes the request's model on c, for the price table.
func bufferBody(r *http.Request, c *call, wantModel bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	_ = r.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	if len(body) > maxRequestBody {
		return fmt.Errorf("request body over %d MiB", maxRequestBody>>20)
	}
	if c.api != apiOther {
		if body, err = meterable(body, c, wantModel); err != nil {
			return err
		}
	}
	c.reqBytes = int64(len(body))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", fmt.Sprint(len(body)))
	return nil
}

// meterable checks that a model call's answer will carry its usage, which is how the gateway counts
// it, and returns the body to send. The body must be a JSON object the gateway reads (what it cannot
// read, a lenient upstream might, and then run a call the gateway did not see the shape of), with
// "stream" a boolean; a background Response (answered "queued", with no usage, and run on where the
// gateway never sees it) is refused. A streamed chat completion is made to ask for its usage
// (stream_options.include_usage), which OpenAI sends only when asked.
func meterable(body []byte, c *call, wantModel bool) ([]byte, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		return nil, errors.New("the request body is not a JSON object")
	}
	if err := noFetchingTools(req); err != nil {
		return nil, err
	}
	stream, err := boolField(req, "stream")
	if err != nil {
		return nil, err
	}
	if c.api == apiResponses {
		if bg, err := boolField(req, "background"); err != nil || bg {
			return nil, cmp.Or(err, errors.New("background responses are not served: the gateway could not count their tokens"))
		}
	}
	if wantModel {
		_ = json.Unmarshal(req["model"], &c.model)
	}
	if c.api != apiChat || !stream {
		return body, nil
	}
	var opts map[string]any
	_ = json.Unmarshal(req["stream_options"], &opts)
	if opts == nil {
		opts = map[string]any{}
	}
	if opts["include_usage"] == true {
		return body, nil
	}
	opts["include_usage"] = true
	req["stream_options"], _ = json.Marshal(opts)
	if b, err := json.Marshal(req); err == nil {
		body = b
	}
	return body, nil
}

// boolField reads a boolean field of a request; absent or null is false.
func boolField(req map[string]json.RawMessage, name string) (bool, error) {
	raw, ok := req[name]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("%q must be true or false", name)
	}
	return b, nil
}

// newProxy is the reverse proxy to both upstreams. FlushInterval -1 flushes every write, so a stream
// passes through as it comes; the outgoing request carries the incoming one's context, so a client
// that goes away (a cancelled turn) cancels the upstream call.
func (g *Gateway) newProxy() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			c := pr.In.Context().Value(ctxCall).(*call)
			up := g.openai
			if c.family == familyAnthropic {
				up = g.anthropic
			}
			pr.Out.URL.Scheme, pr.Out.URL.Host = up.Scheme, up.Host
			pr.Out.URL.Path = strings.TrimSuffix(up.Path, "/") + c.path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = ""
			pr.Out.Header.Del("X-Api-Key")
			pr.Out.Header.Del("Authorization")
			// The gateway reads each answer's usage, so it must see it uncompressed: with the
			// client's Accept-Encoding (SDKs send gzip) the upstream compressed it and no usage was
			// found, whatever the budgets. Without one, the transport asks for gzip itself and
			// decompresses.
			pr.Out.Header.Del("Accept-Encoding")
			// The key's account is the bot's to choose: a sandbox must not pick another organization
			// or project of it (billed and limited there), nor send other credentials.
			for _, h := range []string{"OpenAI-Organization", "OpenAI-Project", "Cookie", "Proxy-Authorization"} {
				pr.Out.Header.Del(h)
			}
			if c.family == familyAnthropic {
				pr.Out.Header.Set("X-Api-Key", g.cfg.AnthropicKey)
			} else {
				pr.Out.Header.Set("Authorization", "Bearer "+g.cfg.OpenAIKey)
			}
		},
		Transport:      g.cfg.Transport,
		FlushInterval:  -1,
		ModifyResponse: g.meterResponse,
		ErrorLog:       zap.NewStdLog(g.log),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c := r.Context().Value(ctxCall).(*call)
			if r.Context().Err() != nil {
				return // the client went away: nobody to answer
			}
			g.log.Warn("upstream call failed", zap.String("thread", c.thread), zap.Error(err))
			if errors.Is(err, errAnswerTooLarge) {
				writeError(w, c.family, http.StatusBadGateway, "api_error", "threadbox gateway: "+err.Error())
				return
			}
			writeError(w, c.family, http.StatusBadGateway, "api_error", "threadbox gateway: the model API could not be reached")
		},
	}
}

// meterResponse arranges for the call's usage to be recorded on its turn. A stream is metered as it
// passes; a whole JSON answer is read first (the upstream made it whole anyway), so that its usage is
// recorded before the client has it, and so before the turn can finish.
func (g *Gateway) meterResponse(resp *http.Response) error {
	c := resp.Request.Context().Value(ctxCall).(*call)
	if c.api == apiOther || resp.StatusCode/100 != 2 {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		resp.Body = &meteredBody{ReadCloser: resp.Body, m: usageMeter{api: c.api}, reqBytes: c.reqBytes, record: func(u Usage) { g.record(c, u) }}
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody+1))
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the upstream answer: %w", err)
	}
	if int64(len(body)) > maxJSONBody {
		return fmt.Errorf("%w (%d MiB)", errAnswerTooLarge, maxJSONBody>>20)
	}
	if u, ok := jsonUsage(body); ok {
		g.record(c, u)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// record adds a call's usage to its turn. It runs detached from the request: a call the client gave
// up on still cost what it cost.
func (g *Gateway) record(c *call, u Usage) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.store.TurnAddUsage(ctx, c.turnID, u.Input, u.Output, g.cost(c.model, u)); err != nil {
		g.log.Warn("recording model usage", zap.String("thread", c.thread), zap.Int64("turn", c.turnID), zap.Error(err))
	}
}

// cost prices a call by the price table; a model the table misses costs the dearest entries (the
// agent names the model: one missing from the table must not be free), logged once.
func (g *Gateway) cost(model string, u Usage) int64 {
	if g.cfg.Prices == nil {
		return 0
	}
	pr, ok := g.cfg.Prices.Lookup(model)
	if !ok {
		pr = g.cfg.Prices.Dearest()
		g.mu.Lock()
		first := !g.unpriced[model] && len(g.unpriced) < maxUnpricedLogged
		if first {
			g.unpriced[model] = true
		}
		g.mu.Unlock()
		if first {
			g.log.Warn("model not in gateway.prices: its calls cost what the dearest entries cost", zap.String("model", model))
		}
	}
	return pr.CostMicros(u)
}

// maxUnpricedLogged bounds the unpriced models remembered (the agent names them, as many as it likes).
const maxUnpricedLogged = 256

// meteredBody feeds a streamed answer to its usage meter as the proxy copies it. The usage is
// recorded inside the Read that carries the closing event, before its bytes go on to the client: the
// runtime cannot end the turn before its usage is on record.
type meteredBody struct {
	io.ReadCloser
	m        usageMeter
	reqBytes int64
	record   func(Usage)
	recorded bool
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.m.feed(p[:n]) && !b.recorded {
		b.recorded = true
		b.record(b.m.usage)
	}
	return n, err
}

// Close records a stream that ended before its closing usage: the upstream was paid for what it
// read and wrote all the same. OpenAI sends its usage only in the last event, so a client that hangs
// up after the last text (as a hostile agent can, on every call) would otherwise be counted nothing.
// What the stream did report stands; the input it did not is estimated at four bytes of request a
// token, and the output is at least one token per event that passed.
func (b *meteredBody) Close() error {
	if !b.recorded {
		b.recorded = true
		b.record(b.m.cutShort(b.reqBytes))
	}
	return b.ReadCloser.Close()
}

// writeError answers in the error format of the API family, so that the runtime shows the message.
func writeError(w http.ResponseWriter, fam family, status int, errType, msg string) {
	var body any
	if fam == familyOpenAI {
		body = map[string]any{"error": map[string]any{"message": msg, "type": errType, "code": errType}}
	} else {
		body = map[string]any{"type": "error", "error": map[string]string{"type": errType, "message": msg}}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
