// Package daytonafake is a fake of Daytona's API, toolbox and preview proxy, for tests.
//
// It validates every request against Daytona's published specs (kin-openapi) and records each
// violation (Violations; the test that started the fake fails at its end if there is any), moves
// sandboxes through Daytona's states asynchronously (creating → started, stopping → stopped,
// starting → started, destroying → gone, with 409 while a transition is in flight and 400 for a
// wrong state), and answers with Daytona's error shapes. Each sandbox is backed by a real sandbox of
// another provider (Docker in tests), so exec and files are real. Faults can be injected: status
// codes for an operation (429, 5xx), a create that is carried out but never answered (or carried
// out only after the client gave up), a sandbox stopped or deleted out of band, and a preview token
// that expires.
//
// It imports no provider: the backend is passed in, so the layer rules hold (sandbox/<provider>
// imports sandbox only).
package daytonafake

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// APIKey is the key the fake accepts unless Options.APIKey says otherwise.
const APIKey = "dtn_fake_key"

// MinSDKVersion is the lowest X-Daytona-SDK-Version the toolbox accepts without a violation: below it
// the daemon answers logs in plain text and combines output (cloud-apis.md §1.1).
const MinSDKVersion = "0.167.0"

// Options configures a Fake.
type Options struct {
	// Backend runs the sandboxes (required). Its handles never leave the fake.
	Backend sandbox.Provider
	// Snapshots are the snapshot names the fake knows; each is also the backend image it runs.
	Snapshots []string
	// APIKey is the bearer token accepted (default APIKey).
	APIKey string
	// OmitToolboxURL leaves toolboxProxyUrl empty in sandbox objects, as older API versions did, so
	// that clients must ask GET /sandbox/{id}/toolbox-proxy-url.
	OmitToolboxURL bool
	// Deployment labels the backend's sandboxes (default "daytonafake"), so they are told apart from
	// anything else on the backend.
	Deployment string
	// ExpectViolations is for tests of the validator itself. Otherwise the test that started the
	// fake fails when it ends if any request broke the specs, so that no suite can forget to check.
	ExpectViolations bool
}

// Fake is a running fake Daytona. Its methods are safe for concurrent use.
type Fake struct {
	t    testing.TB
	opts Options
	srv  *httptest.Server
	val  *validator

	ctx     context.Context // ends at Close: background transitions and commands stop
	cancel  context.CancelFunc
	closing chan struct{} // closed first thing in Close: held requests give up
	once    sync.Once
	wg      sync.WaitGroup // background work, waited for by Close

	mu         sync.Mutex // protects the following
	boxes      map[string]*box
	faults     []*Fault
	calls      map[string]int
	violations []string
	hold       chan struct{} // while set, transitions wait for it to close
	held       chan string   // each held transition's sandbox ID
	awaits     map[string][]chan struct{}
}

// New starts a fake and closes it (destroying its sandboxes) when tb ends.
func New(tb testing.TB, opts Options) *Fake {
	tb.Helper()
	if opts.Backend == nil {
		tb.Fatal("daytonafake: Options.Backend is required")
	}
	if opts.APIKey == "" {
		opts.APIKey = APIKey
	}
	if opts.Deployment == "" {
		opts.Deployment = "daytonafake"
	}
	val, err := newValidator()
	if err != nil {
		tb.Fatalf("daytonafake: load specs: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fake{t: tb, opts: opts, val: val, ctx: ctx, cancel: cancel, closing: make(chan struct{}),
		boxes: map[string]*box{}, calls: map[string]int{}}
	mux := http.NewServeMux()
	f.routeAPI(mux)
	f.routeToolbox(mux)
	mux.HandleFunc("/preview/{target}/", f.preview)
	f.srv = httptest.NewServer(f.middleware(mux))
	tb.Cleanup(f.Close)
	if !opts.ExpectViolations {
		// Runs before Close (cleanups run last first), once the test's own requests are done.
		tb.Cleanup(func() {
			if v := f.Violations(); len(v) > 0 {
				tb.Errorf("daytonafake: %d requests broke Daytona's specs:\n%s", len(v), strings.Join(v, "\n"))
			}
		})
	}
	return f
}

// APIURL is the API base, as sandbox.daytona.api_url.
func (f *Fake) APIURL() string { return f.srv.URL + "/api" }

// Close stops the server and destroys every sandbox still on the backend.
func (f *Fake) Close() {
	f.once.Do(func() { close(f.closing) })
	f.srv.Close()
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	boxes := make([]*box, 0, len(f.boxes))
	for _, b := range f.boxes {
		boxes = append(boxes, b)
	}
	f.boxes = map[string]*box{}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, b := range boxes {
		if !b.backend.IsZero() {
			if err := f.opts.Backend.Destroy(ctx, b.backend); err != nil {
				f.t.Logf("daytonafake: destroy backend of %s: %v", b.id, err)
			}
		}
	}
}

// Violations returns every request that did not match the specs (or the SDK-version rule).
func (f *Fake) Violations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.violations...)
}

// Calls reports how many requests for operationID (as in the specs) the fake has received.
func (f *Fake) Calls(operationID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[operationID]
}

// Await returns a channel closed when the next request for operationID has been answered.
func (f *Fake) Await(operationID string) <-chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.awaits == nil {
		f.awaits = map[string][]chan struct{}{}
	}
	f.awaits[operationID] = append(f.awaits[operationID], ch)
	return ch
}

func (f *Fake) answered(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.awaits[op] {
		close(ch)
	}
	delete(f.awaits, op)
}

// Fault is an injected failure for one operation (an operationId of the specs).
type Fault struct {
	Op string
	// Status is answered instead of the operation (429, 500, 503…) with Daytona's error body; the
	// operation is not carried out.
	Status int
	// Hang carries the operation out and then never answers: the client times out after its request
	// had its effect.
	Hang bool
	// Release, with Hang, delays the operation instead: it is carried out only once the client has
	// given up and Release is closed, as a request stuck in Daytona's queue past the client's
	// timeout would be. A lookup right after the timeout finds nothing; the effect appears later.
	Release <-chan struct{}
	// Times is how many requests it applies to (0: once).
	Times int
}

// Inject adds a fault; faults apply in the order injected.
func (f *Fake) Inject(ft Fault) {
	if ft.Times <= 0 {
		ft.Times = 1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &ft)
}

// takeFault counts a call of op and returns the fault that applies to it, if any.
func (f *Fake) takeFault(op string) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	for i, ft := range f.faults {
		if ft.Op == op {
			ft.Times--
			if ft.Times == 0 {
				f.faults = append(f.faults[:i], f.faults[i+1:]...)
			}
			return ft
		}
	}
	return nil
}

func (f *Fake) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.t.Logf("daytonafake: spec violation: %s", msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations = append(f.violations, msg)
}

// middleware checks auth and the specs before any handler runs, and applies injected faults.
func (f *Fake) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := ""
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/"):
			kind = "api"
		case strings.HasPrefix(r.URL.Path, "/toolbox/"):
			kind = "toolbox"
		default: // the preview proxy checks its own token
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+f.opts.APIKey {
			f.apiError(w, r, http.StatusUnauthorized, "Invalid credentials")
			return
		}
		op, err := f.val.validate(r, kind)
		if err != nil {
			f.violation("%s %s: %v", r.Method, r.URL.Path, err)
			f.apiError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if kind == "toolbox" && !sdkVersionOK(r.Header.Get("X-Daytona-SDK-Version")) {
			f.violation("%s %s: X-Daytona-SDK-Version %q, want >= %s", r.Method, r.URL.Path,
				r.Header.Get("X-Daytona-SDK-Version"), MinSDKVersion)
		}
		defer f.answered(op)
		if ft := f.takeFault(op); ft != nil {
			if !ft.Hang {
				f.apiError(w, r, ft.Status, http.StatusText(ft.Status))
				return
			}
			if ft.Release != nil {
				// Answer nobody; once the client has given up and the test says so, carry it out.
				select {
				case <-r.Context().Done():
				case <-f.closing:
					return
				}
				select {
				case <-ft.Release:
					next.ServeHTTP(discard{}, r)
				case <-f.closing:
				}
				return
			}
			// Carry the operation out, answer nobody, and hold the connection until the client gives up.
			next.ServeHTTP(discard{}, r)
			select {
			case <-r.Context().Done():
			case <-f.closing:
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// discard is a ResponseWriter whose answer goes nowhere (a Hang fault).
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}

// apiError answers with Daytona's error body: the API's shape for API paths, the daemon's for the
// toolbox (cloud-apis.md §1.7, §1.9).
func (f *Fake) apiError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	body := map[string]any{
		"path": r.URL.Path, "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"statusCode": status, "message": msg,
	}
	if strings.HasPrefix(r.URL.Path, "/toolbox/") {
		body["source"] = "DAYTONA_DAEMON"
		body["method"] = r.Method
	} else {
		body["error"] = http.StatusText(status)
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sdkVersionOK reports whether v is at least MinSDKVersion; a version containing "dev" counts as new,
// as in the daemon.
func sdkVersionOK(v string) bool {
	if v == "" {
		return false
	}
	if strings.Contains(v, "dev") {
		return true
	}
	return compareVersions(strings.TrimPrefix(v, "v"), MinSDKVersion) >= 0
}

func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			_, _ = fmt.Sscan(pa[i], &x)
		}
		if i < len(pb) {
			_, _ = fmt.Sscan(pb[i], &y)
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

func newID() string { return strings.ToLower(rand.Text()[:16]) }

// goBackground runs f in the background, tracked so Close waits for it.
func (f *Fake) goBackground(fn func(ctx context.Context)) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn(f.ctx)
	}()
}
