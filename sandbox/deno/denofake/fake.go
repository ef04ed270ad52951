// Package denofake is a fake of Deno Deploy's sandbox service, for tests: the console REST API v2
// (volumes, snapshots, the sandbox list), the sandbox host's REST API v3 (kill, extend, expose) and
// the JSON-RPC protocol over a WebSocket (spawn, process wait/kill, files, env), as recorded in the
// shared reference cloud-apis.md Part 2.
//
// Each sandbox is backed by a real sandbox of another provider (Docker, network none, in tests), so
// processes and files are real. Volumes and snapshots are modelled by the fake: a volume's content
// is a tar of the sandbox's /workspace, taken when the sandbox dies and unpacked when one boots from
// it; a snapshot is a copy of a detached volume's content. (Only /workspace persists, where Deno
// persists the whole root volume: the agent's work lives there.)
//
// It enforces Deno's rules and answers with Deno's error shapes ({code, message} on REST, the result
// union and ErrObj on RPC): slugs (2–32 of a-z, 0-9, '-', one namespace for volumes and snapshots),
// at most 5 labels, regions, capacity, boot only from a bootable detached volume, no snapshot of an
// attached volume (500, as seed 001 observed right after a kill), no delete of a snapshot a volume
// was made from, no delete of an attached volume, a source volume deleted under a running snapshot
// job kills the job (JOB_IS_DEAD), the lifetime deadline (stop_at_ms, +30 min at most per extension;
// a sandbox past it is stopped), and a limit of concurrent sandboxes. Faults can be injected per
// operation.
//
// It imports no provider: the backend is passed in, so the layer rules hold.
package denofake

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// Token is the organization token the fake accepts unless Options.Token says otherwise.
const Token = "ddo_fake_token"

// Lifetime is the most a sandbox may live per create or extension.
const Lifetime = 30 * time.Minute

// Options configures a Fake.
type Options struct {
	// Backend runs the sandboxes (required).
	Backend sandbox.Provider
	// Image is the backend image every sandbox runs (Deno's platform OS).
	Image string
	// Snapshots are bootable snapshots that exist from the start (empty /workspace), in region ord.
	Snapshots []string
	// Token is the bearer token accepted (default Token). A token not starting with ddo_ also needs
	// X-Deno-Org: Org.
	Token, Org string
	// MaxRunning limits concurrent running sandboxes (0: no limit).
	MaxRunning int
	// Clock drives deadlines (nil: the real clock; the deadline is then checked on each request).
	Clock *Clock
	// PageSize is the console lists' default page size (default 10, so clients must follow Link).
	PageSize int
	// Deployment labels the backend's sandboxes (default "denofake").
	Deployment string
}

// Fake is a running fake Deno Deploy. Its methods are safe for concurrent use.
type Fake struct {
	t    testing.TB
	opts Options
	srv  *httptest.Server

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex // protects the following
	boxes     map[string]*box
	volumes   map[string]*volume   // by id
	snapshots map[string]*snapshot // by id
	faults    []*Fault
	calls     map[string]int
	awaits    map[string][]chan struct{}
	holdJobs  chan struct{} // while set, snapshot jobs wait for it to close

	bgMu    sync.Mutex // protects closing, and orders wg.Add before Close's wg.Wait
	closing bool
}

// New starts a fake and closes it (destroying its backend sandboxes) when tb ends.
func New(tb testing.TB, opts Options) *Fake {
	tb.Helper()
	if opts.Backend == nil || opts.Image == "" {
		tb.Fatal("denofake: Options.Backend and Options.Image are required")
	}
	if opts.Token == "" {
		opts.Token = Token
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 10
	}
	if opts.Deployment == "" {
		opts.Deployment = "denofake"
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fake{t: tb, opts: opts, ctx: ctx, cancel: cancel, boxes: map[string]*box{}, volumes: map[string]*volume{},
		snapshots: map[string]*snapshot{}, calls: map[string]int{}, awaits: map[string][]chan struct{}{}}
	for _, s := range opts.Snapshots {
		f.snapshots[newResID("snp")] = &snapshot{slug: s, region: "ord", bootable: true}
	}
	for id, s := range f.snapshots {
		s.id = id
	}
	if opts.Clock != nil {
		opts.Clock.onAdvance(f.expireDue)
	}
	mux := http.NewServeMux()
	f.routeConsole(mux)
	f.routeHost(mux)
	f.srv = httptest.NewServer(f.auth(mux))
	tb.Cleanup(f.Close)
	return f
}

// ConsoleURL is the console API base, as sandbox.deno.console_url.
func (f *Fake) ConsoleURL() string { return f.srv.URL }

// SandboxURL is the sandbox host base with the {region} placeholder, as sandbox.deno.sandbox_url.
// The fake checks that the region filled in is the sandbox's.
func (f *Fake) SandboxURL() string { return f.srv.URL + "/host/{region}" }

// Close stops the server and destroys every backend sandbox still running.
func (f *Fake) Close() {
	f.srv.CloseClientConnections()
	f.srv.Close()
	f.cancel()
	f.bgMu.Lock()
	f.closing = true
	f.bgMu.Unlock()
	f.wg.Wait()
	f.mu.Lock()
	var hs []sandbox.Handle
	for _, b := range f.boxes {
		if !b.backend.IsZero() {
			hs = append(hs, b.backend)
			b.backend = sandbox.Handle{}
		}
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range hs {
		if err := f.opts.Backend.Destroy(ctx, h); err != nil {
			f.t.Logf("denofake: destroy backend %s: %v", h.ID, err)
		}
	}
}

func (f *Fake) now() time.Time {
	if f.opts.Clock != nil {
		return f.opts.Clock.Now()
	}
	return time.Now()
}

// Fault is an injected failure for one operation (see the Op* constants).
type Fault struct {
	Op string
	// Status and Code are answered instead of the operation ({code, message} body); the operation is
	// not carried out.
	Status int
	Code   string
	// RetryAfter, when set, is sent as the answer's Retry-After header (seconds).
	RetryAfter int
	// Times is how many requests it applies to (0: once).
	Times int
}

// Operation names for faults, Calls and Await.
const (
	OpListSandboxes  = "listSandboxes"
	OpCreateVolume   = "createVolume"
	OpListVolumes    = "listVolumes"
	OpGetVolume      = "getVolume"
	OpDeleteVolume   = "deleteVolume"
	OpSnapshotVolume = "snapshotVolume"
	OpListSnapshots  = "listSnapshots"
	OpGetSnapshot    = "getSnapshot"
	OpDeleteSnapshot = "deleteSnapshot"
	OpCreateSandbox  = "createSandbox"
	OpConnect        = "connectSandbox"
	OpKill           = "killSandbox"
	OpExtend         = "extendTimeout"
	OpExposeHTTP     = "exposeHttp"
	OpExposeSSH      = "exposeSsh"
)

// Inject adds a fault; faults apply in the order injected.
func (f *Fake) Inject(ft Fault) {
	if ft.Times <= 0 {
		ft.Times = 1
	}
	if ft.Code == "" {
		ft.Code = "INTERNAL_SERVER_ERROR"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &ft)
}

// Calls reports how many requests for op the fake has received.
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Await returns a channel closed when the next request for op has been answered.
func (f *Fake) Await(op string) <-chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.awaits[op] = append(f.awaits[op], ch)
	return ch
}

// op counts a call, applies a fault if one is due (answering it, and returning false), and arranges
// for Await channels to be closed when the handler returns (call the returned func).
func (f *Fake) op(w http.ResponseWriter, name string) (done func(), ok bool) {
	f.mu.Lock()
	f.calls[name]++
	var ft *Fault
	for i, x := range f.faults {
		if x.Op == name {
			ft = x
			if x.Times--; x.Times == 0 {
				f.faults = append(f.faults[:i], f.faults[i+1:]...)
			}
			break
		}
	}
	f.mu.Unlock()
	done = func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, ch := range f.awaits[name] {
			close(ch)
		}
		delete(f.awaits, name)
	}
	if ft != nil {
		if ft.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(ft.RetryAfter))
		}
		apiError(w, ft.Status, ft.Code, "injected fault")
		done()
		return func() {}, false
	}
	return done, true
}

// auth checks the token (and X-Deno-Org for non-organization tokens) and runs the expiry pass.
func (f *Fake) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok != f.opts.Token {
			apiError(w, http.StatusUnauthorized, "INVALID_TOKEN", "The provided token is invalid or expired.")
			return
		}
		if !strings.HasPrefix(tok, "ddo_") && r.Header.Get("X-Deno-Org") != f.opts.Org {
			apiError(w, http.StatusBadRequest, "ORG_REQUIRED", "A personal token needs the X-Deno-Org header.")
			return
		}
		f.expireDue()
		next.ServeHTTP(w, r)
	})
}

// apiError answers with Deno's console error body {code, message}.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-deno-trace-id", newResID("trc"))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeStrict reads a JSON body, refusing unknown fields (the SDK never sends any).
func decodeStrict(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// newResID is an opaque resource id.
func newResID(prefix string) string { return prefix + "_" + strings.ToLower(rand.Text()[:20]) }

// sandboxIDChars is the alphabet of sandbox ids (cloud-apis.md §2.3).
const sandboxIDChars = "0123456789abcdefghjkmnpqrstuvwxyz"

func newSandboxID(region string) string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = sandboxIDChars[int(b[i])%len(sandboxIDChars)]
	}
	return "sbx_" + region + "_" + string(b)
}

func (f *Fake) goBackground(fn func(ctx context.Context)) {
	f.bgMu.Lock()
	defer f.bgMu.Unlock()
	if f.closing {
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn(f.ctx)
	}()
}

// HoldSnapshotJobs keeps snapshot jobs running (their snapshots not bootable) until release is
// called, so that a test can act while a job is in flight.
func (f *Fake) HoldSnapshotJobs() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.holdJobs = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.holdJobs = nil
			f.mu.Unlock()
			close(ch)
		})
	}
}

// Clear removes the faults still pending for op.
func (f *Fake) Clear(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.faults[:0]
	for _, ft := range f.faults {
		if ft.Op != op {
			kept = append(kept, ft)
		}
	}
	f.faults = kept
}
