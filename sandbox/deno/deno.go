// Package deno is the sandbox provider backed by Deno Deploy sandboxes. There is no Go SDK: this
// package speaks the wire protocol recorded in the shared reference cloud-apis.md Part 2 (the console
// REST API v2 for volumes, snapshots and the sandbox list; the sandbox host's REST API v3 for kill,
// extend and expose; JSON-RPC over a WebSocket for processes, files and env), and follows seed 001's
// field notes:
//
//   - A Deno sandbox is not a container and has no "stop". A Threadbox sandbox (a "box", the Handle's
//     ID) is therefore a chain of Deno resources named after it: volumes <id>-v<n> and snapshots
//     <id>-s<n>, and Deno sandboxes labelled threadbox.box=<id>. It boots from a volume made from the
//     base snapshot (never from a snapshot: the overlay hides what was installed). Pause kills the
//     sandbox, snapshots the volume once it has detached, and deletes the volume; resume makes a new
//     volume from the snapshot and boots it. Old volumes and snapshots are deleted volumes first (a
//     snapshot cannot go while a volume made from it exists).
//   - A sandbox lives at most 30 minutes per extension. While an Exec runs, the provider extends the
//     deadline before it comes (a lease); Sweep pauses the idle ones nearing it; one that expired
//     anyway is stopped, and Start boots its volume again.
//   - The kill goes over REST with its own timeout; transient 5xx are retried with backoff; the
//     concurrency limit is ErrLimit, with a message fit for a chat reply.
//
// Deno wire types never leave this package.
package deno

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// Name is the provider's config name, stored in every Handle.
const Name = "deno"

// Defaults for Options.
const (
	DefaultConsoleURL     = "https://console.deno.com"
	DefaultSandboxURL     = "https://{region}.sandbox-api.deno.net"
	DefaultRegion         = "ord"
	DefaultVolumeCapacity = "10GB"
	// Lifetime is the most Deno grants per create or extension.
	Lifetime = 30 * time.Minute
)

// Label keys of our own, beside sandbox.Label*. Deno allows 5 labels: deployment, thread,
// generation, box and image.
const (
	LabelBox   = "threadbox.box"
	LabelImage = "threadbox.image"
)

var (
	// ErrLimit: Deno refused another sandbox (the account's concurrency limit). It wraps
	// sandbox.ErrProviderBusy (and so ErrUnavailable): callers wait rather than recreate.
	ErrLimit = fmt.Errorf("the limit of concurrently running Deno sandboxes is reached: this thread can run once another one is idle: %w", sandbox.ErrProviderBusy)
	// ErrBadToken: the console or the host refused the token.
	ErrBadToken = errors.New("deno token refused")
)

// Clock is the time source for the sandbox lifetime (a fake in tests).
type Clock interface {
	Now() time.Time
	After(time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Options configures a Provider.
type Options struct {
	// Token is a ddo_ organization token, or a personal token with Org (sent as X-Deno-Org).
	Token, Org string
	// ConsoleURL (default DefaultConsoleURL) and SandboxURL (default DefaultSandboxURL; {region} is
	// filled in) are the API bases.
	ConsoleURL, SandboxURL string
	// Region is ord or ams (default ord).
	Region string
	// BaseSnapshot is what a new box's volume is made from when Spec.Image is not itself a snapshot
	// slug (or builtin:…), as an OCI image name such as threadbox/sandbox:latest is not.
	BaseSnapshot string
	// VolumeCapacity is each volume's size (bytes, or "10GB", "512MiB"…; default 10GB).
	VolumeCapacity string
	// Clock defaults to the real clock.
	Clock Clock
	// HTTPClient defaults to a client without timeout (each call has its own).
	HTTPClient *http.Client
	// Retries of a transient failure (default 4); RequestTimeout bounds each REST call (default 30 s);
	// KillTimeout the kill (default 10 s, as the SDK); BootTimeout a boot (default 2 min);
	// DetachTimeout the wait for a killed sandbox's volume and a snapshot job (default 2 min).
	Retries                                                 int
	RequestTimeout, KillTimeout, BootTimeout, DetachTimeout time.Duration
	// ExtendMargin: a running Exec extends the deadline when less than this is left (default 5 min).
	// PauseMargin: Sweep pauses an idle sandbox with less than this left (default 3 min). It must be
	// smaller than ExtendMargin, so a sandbox with a turn running is extended before it could be paused.
	ExtendMargin, PauseMargin time.Duration
	Logger                    *zap.Logger
}

// Provider implements sandbox.Provider on Deno Deploy.
type Provider struct {
	opts  Options
	http  *http.Client
	clock Clock
	log   *zap.Logger
	// cleanups are the clean-ups of spawns whose callers left (spawnOwned); Close waits for them.
	cleanups sync.WaitGroup

	mu    sync.Mutex // protects the following
	lives map[string]*live
}

var _ sandbox.Provider = (*Provider)(nil)

// New checks the options; it does not contact Deno (doctor does, through Check).
func New(opts Options) (*Provider, error) {
	if opts.Token == "" {
		return nil, errors.New("deno: a token is required (sandbox.deno.token)")
	}
	if !strings.HasPrefix(opts.Token, "ddo_") && opts.Org == "" {
		return nil, errors.New("deno: a personal token needs the organization (sandbox.deno.org); or use a ddo_ organization token")
	}
	set := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	set(&opts.ConsoleURL, DefaultConsoleURL)
	set(&opts.SandboxURL, DefaultSandboxURL)
	set(&opts.Region, DefaultRegion)
	set(&opts.VolumeCapacity, DefaultVolumeCapacity)
	opts.ConsoleURL = strings.TrimSuffix(opts.ConsoleURL, "/")
	opts.SandboxURL = strings.TrimSuffix(opts.SandboxURL, "/")
	if opts.Region != "ord" && opts.Region != "ams" {
		return nil, fmt.Errorf("deno: region %q: must be ord or ams", opts.Region)
	}
	if opts.BaseSnapshot != "" && !validRoot(opts.BaseSnapshot) {
		return nil, fmt.Errorf("deno: base snapshot %q: not a valid snapshot slug", opts.BaseSnapshot)
	}
	dur := func(p *time.Duration, def time.Duration) {
		if *p <= 0 {
			*p = def
		}
	}
	dur(&opts.RequestTimeout, 30*time.Second)
	dur(&opts.KillTimeout, 10*time.Second)
	dur(&opts.BootTimeout, 2*time.Minute)
	dur(&opts.DetachTimeout, 2*time.Minute)
	dur(&opts.ExtendMargin, 5*time.Minute)
	dur(&opts.PauseMargin, 3*time.Minute)
	if opts.PauseMargin >= opts.ExtendMargin {
		return nil, fmt.Errorf("deno: pause margin %s must be below the extend margin %s", opts.PauseMargin, opts.ExtendMargin)
	}
	if opts.Retries == 0 {
		opts.Retries = 4
	}
	p := &Provider{opts: opts, http: opts.HTTPClient, clock: opts.Clock, log: opts.Logger, lives: map[string]*live{}}
	if p.http == nil {
		p.http = &http.Client{}
	}
	if p.clock == nil {
		p.clock = realClock{}
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	p.log = p.log.Named("deno")
	return p, nil
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements sandbox.Provider. Deno runs everything as its own user (app), sizes only
// memory, and its network control is an allow-list, not a missing interface; a sandbox can die
// behind our back (its deadline, the dashboard).
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Isolated: true, OutOfBand: true}
}

// Close drops the open sockets. It never kills sandboxes.
func (p *Provider) Close() error {
	p.mu.Lock()
	for id, lv := range p.lives {
		lv.conn.close()
		delete(p.lives, id)
	}
	p.mu.Unlock()
	// The sockets are closed: a clean-up still under way ends at once (its calls fail), and none
	// outlives the provider.
	p.cleanups.Wait()
	return nil
}

// handleVersion is the shape of handleState.
const handleVersion = 1

// handleState is the Handle's private part: what a resume needs that Deno does not keep.
type handleState struct {
	Region  string            `json:"region"`
	WorkDir string            `json:"workdir"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Env is the spec's (already filtered) environment, set again in every sandbox the box boots.
	Env map[string]string `json:"env,omitempty"`
	// Network full leaves Deno's network open; anything else (none, or a handle without it) boots
	// with an empty allow_net: no outbound host.
	Network sandbox.NetworkMode `json:"network,omitempty"`
}

func (p *Provider) decode(h sandbox.Handle) (handleState, error) {
	st := handleState{Region: p.opts.Region, WorkDir: sandbox.DefaultWorkDir}
	if h.Provider != Name || !validBoxID(h.ID) {
		return st, fmt.Errorf("%w: %q is not a deno sandbox", sandbox.ErrBadHandle, h.ID)
	}
	if len(h.State) > 0 {
		if err := json.Unmarshal(h.State, &st); err != nil {
			return st, fmt.Errorf("%w: %w", sandbox.ErrBadHandle, err)
		}
	}
	return st, nil
}

// newBoxID is "tb", 6 hex of the deployment's hash (so List can find a deployment's volumes and
// snapshots, which carry no labels), the creation time (7 base-36 digits of Unix seconds: the console
// reports no age for volumes and snapshots, and the reaper spares what has none) and 5 random
// characters: 20 in all, leaving room for "-v<n>" within Deno's 32.
func newBoxID(deployment string, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 36)
	ts = strings.Repeat("0", max(0, 7-len(ts))) + ts
	return boxPrefix(deployment) + ts + strings.ToLower(rand.Text()[:5])
}

// boxTime is the creation time a box id carries.
func boxTime(id string) time.Time {
	sec, err := strconv.ParseInt(id[8:15], 36, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

func boxPrefix(deployment string) string {
	sum := sha256.Sum256([]byte(deployment))
	return "tb" + hex.EncodeToString(sum[:])[:6]
}

func validBoxID(id string) bool {
	if len(id) != 20 || !strings.HasPrefix(id, "tb") {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// validRoot: a snapshot slug or a builtin image, which Spec.Image may name directly.
func validRoot(s string) bool {
	if strings.HasPrefix(s, "builtin:") {
		return true
	}
	if len(s) < 2 || len(s) > 32 || s[0] == '-' || s[len(s)-1] == '-' || (len(s) >= 4 && s[2:4] == "--") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func volSlug(id string, n int) string  { return fmt.Sprintf("%s-v%d", id, n) }
func snapSlug(id string, n int) string { return fmt.Sprintf("%s-s%d", id, n) }

// parseSlug splits <id>-v<n> / <id>-s<n>.
func parseSlug(slug string) (id string, kind byte, n int, ok bool) {
	i := strings.LastIndexByte(slug, '-')
	if i < 0 || i+2 >= len(slug) {
		return "", 0, 0, false
	}
	kind = slug[i+1]
	if kind != 'v' && kind != 's' {
		return "", 0, 0, false
	}
	if _, err := fmt.Sscanf(slug[i+2:], "%d", &n); err != nil || fmt.Sprint(n) != slug[i+2:] {
		return "", 0, 0, false
	}
	return slug[:i], kind, n, validBoxID(slug[:i])
}
