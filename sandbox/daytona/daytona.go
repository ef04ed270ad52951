// Package daytona is the sandbox provider backed by Daytona (https://daytona.io), a hosted sandbox
// service. It is a thin layer over clients generated from Daytona's API and toolbox specs
// (internal/api, internal/toolbox; `make generate`), and follows how Daytona's own SDK talks to the
// service (shared reference cloud-apis.md Part 1):
//
//   - lifecycle through the API: create from a snapshot, stop (pause), start (resume), delete, with
//     state waits that back off under a deadline; 409 means a transition is in flight (wait), 404
//     means gone (sandbox.ErrNotFound), 429 and 5xx are retried with backoff;
//   - exec and files through the toolbox at {toolboxProxyUrl}/{sandboxId}, with
//     X-Daytona-SDK-Version so the daemon separates stdout from stderr: a command runs in a session
//     of its own, its output streams over the logs WebSocket, and a timeout or a cancelled ctx kills
//     everything it started by an environment marker (as the Docker provider does);
//   - Dial through the port's preview link with its token, refreshed on 401/403.
//
// Daytona wire types never leave this package.
package daytona

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
	"github.com/threadbox/threadbox/sandbox/internal/retryafter"
)

// Name is the provider's config name, stored in every Handle.
const Name = "daytona"

// DefaultAPIURL is Daytona Cloud's API.
const DefaultAPIURL = "https://app.daytona.io/api"

// SDKVersion is the Daytona SDK version whose protocol this provider speaks, sent as
// X-Daytona-SDK-Version: at 0.167.0 and above the daemon answers logs as JSON with stdout and stderr
// apart (cloud-apis.md §1.1).
const SDKVersion = "0.218.0"

// LabelCreate carries a random token per Create, so that a create whose answer was lost can be
// found again by label instead of being repeated.
const LabelCreate = "threadbox.create"

// handleVersion is the shape of handleState; bump it when the shape changes incompatibly.
const handleVersion = 1

// Options configures a Provider.
type Options struct {
	// APIURL is the API base (default DefaultAPIURL). APIKey is sent as a Bearer token.
	APIURL, APIKey string
	// Target is the region (empty: the organisation's default).
	Target string
	// Snapshot, when set, is what sandboxes are created from, whatever the Spec's image says.
	Snapshot string
	// AutoStopMinutes stops a sandbox idle this long, a safety net behind the pool's own idle pause
	// (0: the default, 30). AutoArchiveMinutes and AutoDeleteMinutes are sent when set.
	AutoStopMinutes    int
	AutoArchiveMinutes *int
	AutoDeleteMinutes  *int
	// Deployment, when set, fences the provider to one deployment, as with Docker.
	Deployment string
	// HTTPClient carries every request (default: a client without an overall timeout, since exec
	// streams last as long as their command).
	HTTPClient *http.Client
	// RequestTimeout bounds each API request (default 60 s, Daytona's SDK default).
	RequestTimeout time.Duration
	// StateTimeout bounds a wait for a state (default 5 min).
	StateTimeout time.Duration
	// Logger receives best-effort cleanup failures (default: none).
	Logger *zap.Logger
}

// Provider implements sandbox.Provider on Daytona. It is safe for concurrent use.
type Provider struct {
	opts Options
	hc   *http.Client
	api  *api.Client
	log  *zap.Logger

	mu      sync.Mutex // protects previews
	preview map[string]previewLink
}

var (
	_ sandbox.Provider = (*Provider)(nil)
	_ sandbox.Dialer   = (*Provider)(nil)
)

// New returns a provider. It does not contact Daytona: Check does (doctor calls it).
func New(opts Options) (*Provider, error) {
	if opts.APIKey == "" {
		return nil, errors.New("daytona: sandbox.daytona.api_key is required")
	}
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	if opts.AutoStopMinutes <= 0 {
		opts.AutoStopMinutes = 30
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 60 * time.Second
	}
	if opts.StateTimeout <= 0 {
		opts.StateTimeout = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	p := &Provider{opts: opts, hc: hc, log: opts.Logger.Named("sandbox.daytona"), preview: map[string]previewLink{}}
	c, err := api.NewClient(strings.TrimSuffix(opts.APIURL, "/"), api.WithHTTPClient(hc), api.WithRequestEditorFn(p.headers))
	if err != nil {
		return nil, fmt.Errorf("daytona: api url %q: %w", opts.APIURL, err)
	}
	p.api = c
	return p, nil
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements sandbox.Provider. Daytona runs every command as the sandbox's own user,
// takes resources from the snapshot, and its network block is a firewall, not a missing interface;
// so only isolation and out-of-band changes (auto-stop, the dashboard) are declared.
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Isolated: true, OutOfBand: true}
}

// headers adds what Daytona's SDK sends on every call.
func (p *Provider) headers(_ context.Context, r *http.Request) error {
	r.Header.Set("Authorization", "Bearer "+p.opts.APIKey)
	r.Header.Set("X-Daytona-Source", "threadbox")
	r.Header.Set("X-Daytona-SDK-Version", SDKVersion)
	r.Header.Set("User-Agent", "threadbox/"+SDKVersion)
	return nil
}

// handleState is the provider's private part of a Handle.
type handleState struct {
	// Toolbox is the sandbox's toolboxProxyUrl; WorkDir the spec's work directory.
	Toolbox string `json:"toolbox,omitempty"`
	WorkDir string `json:"workdir,omitempty"`
}

func newHandle(id string, st handleState) sandbox.Handle {
	return sandbox.NewHandle(Name, id, handleVersion, st)
}

func decodeHandle(h sandbox.Handle) (handleState, error) {
	var st handleState
	if err := h.DecodeState(Name, handleVersion, &st); err != nil {
		return st, err
	}
	if st.WorkDir == "" {
		st.WorkDir = sandbox.DefaultWorkDir
	}
	return st, nil
}

// apiError is a non-2xx answer, with Daytona's message (API or daemon error shape).
type apiError struct {
	op      string
	status  int
	message string
	// retryAfter is the server's Retry-After, when it sent one.
	retryAfter time.Duration
}

func (e *apiError) Error() string {
	return fmt.Sprintf("daytona %s: %d %s: %s", e.op, e.status, http.StatusText(e.status), e.message)
}

// Is maps statuses to the sandbox sentinels: 404 is a missing sandbox.
func (e *apiError) Is(target error) bool {
	return target == sandbox.ErrNotFound && e.status == http.StatusNotFound
}

func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status
	}
	return 0
}

// retryable: rate limited, or a server or gateway failure.
func retryable(status int) bool { return status == http.StatusTooManyRequests || status >= 500 }

// errBadAnswer is a 2xx whose body could not be decoded: the request had its effect.
var errBadAnswer = errors.New("decoding the answer")

// decode reads resp: a 2xx is decoded into out (nil: discarded), anything else becomes an apiError.
func decode(op string, resp *http.Response, out any) error {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("daytona %s: reading the answer: %w", op, err)
	}
	over := int64(len(body)) > maxAnswer
	if over {
		body = body[:maxAnswer] // an error's message is clipped anyway
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{op: op, status: resp.StatusCode, message: errorMessage(body)}
		e.retryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), time.Now())
		return e
	}
	if over && out != nil {
		// Not cut and decoded: the answer had its effect (errBadAnswer), and what it says is refused
		// as too large, which is what a listing of too many or too long names must report.
		return fmt.Errorf("daytona %s: %w: more than %d bytes: %w", op, errBadAnswer, maxAnswer, sandbox.ErrTooLarge)
	}
	if out == nil || len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("daytona %s: %w: %w", op, errBadAnswer, err)
	}
	return nil
}

// errorMessage takes message, else error, else the raw body, as the SDK does, cut to maxMessage.
func errorMessage(body []byte) string { return clip(rawErrorMessage(body)) }

// clip cuts text from Daytona to maxMessage runes.
func clip(s string) string { return sandbox.ClipText(s, maxMessage) }

func rawErrorMessage(body []byte) string {
	var e struct {
		Message any    `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil {
		switch m := e.Message.(type) {
		case string:
			if m != "" {
				return m
			}
		case []any: // NestJS validation errors are a list
			parts := make([]string, 0, len(m))
			for _, x := range m {
				parts = append(parts, fmt.Sprint(x))
			}
			return strings.Join(parts, "; ")
		}
		if e.Error != "" {
			return e.Error
		}
	}
	return strings.TrimSpace(string(body))
}

// call runs one idempotent API request, retrying 429 and 5xx answers and transport failures with
// backoff until ctx ends or the attempts run out. Each attempt is bounded by RequestTimeout. When the
// attempts run out on such failures, the error wraps sandbox.ErrUnavailable: the service is down or
// not serving, which says nothing about the sandbox (callers wait, and a maintenance pass goes on
// with the deployment's other providers).
func (p *Provider) call(ctx context.Context, op string, send func(ctx context.Context) (*http.Response, error), out any) error {
	b := newBackoff(100*time.Millisecond, 2, 5*time.Second)
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt > 0 {
			if werr := b.wait(ctx, retryAfter(err)); werr != nil {
				return fmt.Errorf("%w (last: %w)", werr, err)
			}
		}
		err = p.once(ctx, op, send, out)
		if err == nil || !(retryable(statusOf(err)) || isTransport(err)) || ctx.Err() != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
}

// once sends one request under RequestTimeout and decodes its answer.
func (p *Provider) once(ctx context.Context, op string, send func(ctx context.Context) (*http.Response, error), out any) error {
	rctx, cancel := context.WithTimeout(ctx, p.opts.RequestTimeout)
	defer cancel()
	resp, err := send(rctx)
	if err != nil {
		return &transportError{op: op, err: err}
	}
	return decode(op, resp, out)
}

// transportError is a request that got no answer.
type transportError struct {
	op  string
	err error
}

func (e *transportError) Error() string { return fmt.Sprintf("daytona %s: %v", e.op, e.err) }
func (e *transportError) Unwrap() error { return e.err }

func isTransport(err error) bool {
	var te *transportError
	return errors.As(err, &te)
}

// unsent reports whether a transport failure happened before the request left: only then did the
// server surely do nothing.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func retryAfter(err error) time.Duration {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.retryAfter
	}
	return 0
}

// backoff is an exponential delay with a cap.
type backoff struct {
	next, max time.Duration
	factor    float64
}

func newBackoff(first time.Duration, factor float64, max time.Duration) *backoff {
	return &backoff{next: first, max: max, factor: factor}
}

// errRetryPastDeadline: the service asked us to come back after the caller's deadline.
var errRetryPastDeadline = fmt.Errorf("daytona asked to be called again after the deadline: %w", sandbox.ErrUnavailable)

// wait sleeps for the next delay (or at least floor, the server's Retry-After), or until ctx ends.
// When floor reaches past ctx's deadline it returns errRetryPastDeadline at once: waiting out the
// deadline would only delay the same failure.
func (b *backoff) wait(ctx context.Context, floor time.Duration) error {
	d := b.delay(floor)
	if dl, ok := ctx.Deadline(); ok && floor > 0 && time.Until(dl) < d {
		return errRetryPastDeadline
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// delay returns the next delay (at least floor) and grows the following one.
func (b *backoff) delay(floor time.Duration) time.Duration {
	d := max(b.next, floor)
	b.next = min(time.Duration(float64(b.next)*b.factor), b.max)
	return d
}

// cleanupCtx is for best-effort work that must run even when the caller's ctx has ended.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

func randomID() string { return strings.ToLower(rand.Text()[:16]) }

func ptr[T any](v T) *T { return &v }

// maxAnswer bounds one answer read whole (a sandbox, a page of a listing, a script's output).
const maxAnswer = 8 << 20

// maxMessage bounds Daytona's error text kept in our errors, which reach logs and chat threads.
const maxMessage = sandbox.MaxErrorText
