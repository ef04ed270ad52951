package deno

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/internal/retryafter"
)

// APIError is an answer other than 2xx from the console or the sandbox host: Deno's {code, message}
// body with the status.
type APIError struct {
	Op      string
	Status  int
	Code    string
	Message string
	// RetryAfter is the answer's Retry-After (either form, capped at retryafter.Max; 0 when absent).
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("deno: %s: HTTP %d: %s", e.Op, e.Status, e.Message)
	}
	return fmt.Sprintf("deno: %s: HTTP %d %s: %s", e.Op, e.Status, e.Code, e.Message)
}

// Unwrap classifies the answer for the rest of Threadbox.
func (e *APIError) Unwrap() error {
	switch {
	case isLimit(e.Status, e.Code, e.Message):
		return ErrLimit
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return ErrBadToken
	case e.Status >= 500 || e.Status == http.StatusTooManyRequests:
		return sandbox.ErrUnavailable
	}
	return nil
}

// isLimit recognises Deno's refusal to run more sandboxes. The code is not published, so the
// message is matched too, as seed 001 does ("limit", "concurrent", "quota").
func isLimit(status int, code, msg string) bool {
	s := strings.ToLower(code + " " + msg)
	if strings.Contains(s, "rate") {
		return false // a rate limit is retried, not told to the thread
	}
	return (status == http.StatusTooManyRequests || status == http.StatusForbidden || status == http.StatusPaymentRequired || status == http.StatusBadRequest) &&
		(strings.Contains(s, "limit") || strings.Contains(s, "concurrent") || strings.Contains(s, "quota"))
}

func statusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

func codeOf(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// transportError is a request that got no answer.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() []error {
	return []error{e.err, sandbox.ErrUnavailable}
}

// do sends one request to base+path with the auth headers and decodes a 2xx JSON answer into out
// (nil: discarded). Answers of 5xx and failed connections are retried with backoff when retry is
// set (idempotent calls); timeout bounds each attempt (0: none beyond ctx).
func (p *Provider) do(ctx context.Context, op, method, rawURL string, body, out any, retry bool, timeout time.Duration) (http.Header, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("deno: %s: %w", op, err)
		}
	}
	delay := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		hdr, err := p.once(ctx, op, method, rawURL, payload, out, timeout)
		if err == nil || !retry || attempt >= p.opts.Retries || ctx.Err() != nil || !transient(err) {
			return hdr, err
		}
		wait := max(delay, retryAfterOf(err))
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil, err // told to come back after the caller's deadline: asking sooner only adds load
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func retryAfterOf(err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	return 0
}

// transient: worth another try (5xx, 429, no answer).
func transient(err error) bool {
	var te *transportError
	s := statusOf(err)
	return errors.As(err, &te) || s >= 500 || (s == http.StatusTooManyRequests && !errors.Is(err, ErrLimit))
}

// maxAnswer bounds one REST answer, read whole.
const maxAnswer = 8 << 20

func (p *Provider) once(ctx context.Context, op, method, rawURL string, payload []byte, out any, timeout time.Duration) (http.Header, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return nil, fmt.Errorf("deno: %s: %w", op, err)
	}
	p.auth(req.Header)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, &transportError{fmt.Errorf("deno: %s: %w", op, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, &transportError{fmt.Errorf("deno: %s: read answer: %w", op, err)}
	}
	over := len(data) > maxAnswer
	if over {
		data = data[:maxAnswer] // an error's message is clipped anyway
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := apiErr(op, resp.StatusCode, data)
		e.RetryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), time.Now())
		return nil, e
	}
	if over && out != nil {
		// Not cut and decoded (that reads as bad JSON): the answer had its effect, and is refused.
		return nil, fmt.Errorf("deno: %s: an answer past %d bytes: %w", op, maxAnswer, sandbox.ErrTooLarge)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("deno: %s: decode answer: %w", op, err)
		}
	}
	return resp.Header, nil
}

// apiErr reads Deno's {code, message}; anything else is kept as text (the SDK's UNKNOWN_ERROR).
func apiErr(op string, status int, data []byte) *APIError {
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &body) != nil || body.Code == "" {
		body.Code, body.Message = "UNKNOWN_ERROR", strings.TrimSpace(string(data))
	}
	return &APIError{Op: op, Status: status, Code: clip(body.Code), Message: clip(body.Message)}
}

func (p *Provider) auth(h http.Header) {
	h.Set("Authorization", "Bearer "+p.opts.Token)
	if p.opts.Org != "" {
		h.Set("X-Deno-Org", p.opts.Org)
	}
	h.Set("User-Agent", "threadbox-deno")
}

// console is a console API URL.
func (p *Provider) console(path string, q url.Values) string {
	u := p.opts.ConsoleURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// host is a sandbox host URL for region (http or ws scheme) and the path made of segs, each escaped.
// The region and ids come from the console's answers and the URL carries our token: a region must
// be a plain DNS label, so that it cannot move the request to another host.
func (p *Provider) host(region string, ws bool, segs ...string) (string, error) {
	if !validRegion(region) {
		return "", fmt.Errorf("deno: sandbox region %q: not a region name", clip(region))
	}
	u := strings.ReplaceAll(p.opts.SandboxURL, "{region}", region)
	for _, s := range segs {
		u += "/" + url.PathEscape(s)
	}
	if ws {
		if rest, ok := strings.CutPrefix(u, "https://"); ok {
			u = "wss://" + rest
		} else if rest, ok := strings.CutPrefix(u, "http://"); ok {
			u = "ws://" + rest
		}
	}
	return u, nil
}

func validRegion(r string) bool {
	if r == "" || len(r) > 32 || r[0] == '-' {
		return false
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// maxMessage bounds Deno's error text kept in our errors, which reach logs and chat threads.
const maxMessage = sandbox.MaxErrorText

// clip cuts text from Deno to maxMessage runes.
func clip(s string) string { return sandbox.ClipText(s, maxMessage) }

// maxListItems bounds what a console listing keeps: far more volumes and snapshots than a
// deployment holds, and pages of a hostile or broken console must not grow it without end.
const maxListItems = 100_000

// listAll follows a console list's Link header through every page.
func listAll[T any](ctx context.Context, p *Provider, op, path string, q url.Values) ([]T, error) {
	var all []T
	prev := "" // the cursor of the page just read
	next := p.console(path, q)
	for pages := 0; next != ""; pages++ {
		if pages > 1000 {
			return nil, fmt.Errorf("deno: %s: more than 1000 pages", op)
		}
		var page []T
		hdr, err := p.do(ctx, op, http.MethodGet, next, nil, &page, true, p.opts.RequestTimeout)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(all) > maxListItems {
			return nil, fmt.Errorf("deno: %s: more than %d items", op, maxListItems)
		}
		next = nextLink(hdr.Get("Link"))
		if next != "" {
			// Only the cursor is taken from the link (cloud-apis.md §2.1); the rest stays ours.
			lu, err := url.Parse(next)
			if err != nil {
				return nil, fmt.Errorf("deno: %s: bad Link %q: %w", op, next, err)
			}
			nq := url.Values{}
			for k, v := range q {
				nq[k] = v
			}
			cursor := lu.Query().Get("cursor")
			if cursor == q.Get("cursor") || cursor == prev {
				return nil, fmt.Errorf("deno: %s: the next page's cursor %q is this page's", op, clip(cursor))
			}
			prev = cursor
			nq.Set("cursor", cursor)
			next = p.console(path, nq)
		}
	}
	return all, nil
}

// nextLink returns the URL of rel="next" in a Link header.
func nextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		u, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if ok && strings.Contains(params, `rel="next"`) {
			return strings.Trim(strings.TrimSpace(u), "<>")
		}
	}
	return ""
}
