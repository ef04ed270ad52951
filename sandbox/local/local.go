// Package local is a development-only sandbox provider: each sandbox is a directory on this host and
// its commands are ordinary host processes. It isolates nothing: no filesystem jail, no network policy,
// no resource limits, no other user. It refuses to start unless the operator says they understand that
// (sandbox.local.i_understand_no_isolation), and `make run` uses it only when no Docker daemon answers.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// ErrNotAcknowledged is returned by New without the explicit no-isolation acknowledgement.
var ErrNotAcknowledged = errors.New("the local sandbox provider runs agent commands as processes on this host with no isolation; " +
	"set sandbox.local.i_understand_no_isolation: true to use it (development only)")

// Options configures the provider.
type Options struct {
	// Dir holds one directory per sandbox.
	Dir string
	// IUnderstandNoIsolation must be true.
	IUnderstandNoIsolation bool
}

// Provider implements sandbox.Provider with host directories and processes.
type Provider struct {
	dir string

	// mu protects the following.
	mu sync.Mutex
	// procs are the process groups running per sandbox id, so Stop and Destroy can kill them.
	procs map[string]map[int]struct{}
}

var (
	_ sandbox.Provider = (*Provider)(nil)
	_ sandbox.Dialer   = (*Provider)(nil)
)

// New checks the acknowledgement and prepares Dir.
func New(o Options) (*Provider, error) {
	if !o.IUnderstandNoIsolation {
		return nil, ErrNotAcknowledged
	}
	if o.Dir == "" {
		return nil, fmt.Errorf("local provider: sandbox.local.dir is empty")
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("local provider dir %s: %w", o.Dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("local provider dir %s: %w", abs, err)
	}
	return &Provider{dir: abs, procs: map[string]map[int]struct{}{}}, nil
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return "local" }

// Capabilities implements sandbox.Provider: nothing is enforced.
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{OutOfBand: true}
}

// meta is what the provider keeps per sandbox, in <dir>/<id>/meta.json.
type meta struct {
	Labels    map[string]string `json:"labels"`
	Env       map[string]string `json:"env"`
	Image     string            `json:"image"`
	WorkDir   string            `json:"workdir"`
	State     sandbox.State     `json:"state"`
	CreatedAt time.Time         `json:"created_at"`
}

// Root returns the host directory standing in for the sandbox's filesystem root: the sandbox's
// WorkDir (/workspace) is Root()/workspace. Exported for tests and out-of-band tooling.
func (p *Provider) Root(h sandbox.Handle) string { return filepath.Join(p.dir, h.ID, "root") }

func (p *Provider) metaPath(id string) string { return filepath.Join(p.dir, id, "meta.json") }

// Create implements sandbox.Provider.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return sandbox.Handle{}, fmt.Errorf("local create: %w: %w", sandbox.ErrNoEffect, err)
	}
	if len(spec.Mounts) > 0 || len(spec.Command) > 0 {
		return sandbox.Handle{}, fmt.Errorf("local create: %w: %w: mounts and a command need an isolated provider", sandbox.ErrNoEffect, sandbox.ErrUnsupported)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "tbx-" + hex.EncodeToString(b[:])
	h := sandbox.Handle{Provider: p.Name(), ID: id, Version: 1}
	if err := os.MkdirAll(filepath.Join(p.Root(h), filepath.FromSlash(spec.WorkDir)), 0o755); err != nil {
		return sandbox.Handle{}, fmt.Errorf("local create: %w", err)
	}
	m := meta{Labels: spec.Labels.Map(), Env: spec.Env, Image: spec.Image, WorkDir: spec.WorkDir,
		State: sandbox.StateRunning, CreatedAt: time.Now().UTC()}
	if err := p.writeMeta(id, m); err != nil {
		_ = os.RemoveAll(filepath.Join(p.dir, id))
		return sandbox.Handle{}, err
	}
	return h, nil
}

func (p *Provider) writeMeta(id string, m meta) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("local meta: %w", err)
	}
	tmp := p.metaPath(id) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("local meta: %w", err)
	}
	return os.Rename(tmp, p.metaPath(id))
}

func (p *Provider) readMeta(id string) (meta, error) {
	var m meta
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return m, fmt.Errorf("local sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	data, err := os.ReadFile(p.metaPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("local sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("local sandbox %s: %w", id, err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("local sandbox %s meta: %w", id, err)
	}
	return m, nil
}

// Inspect implements sandbox.Provider.
func (p *Provider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	m, err := p.readMeta(h.ID)
	if err != nil {
		return sandbox.Info{}, err
	}
	return p.info(h.ID, m), nil
}

func (p *Provider) info(id string, m meta) sandbox.Info {
	return sandbox.Info{
		Handle:    sandbox.Handle{Provider: p.Name(), ID: id, Version: 1},
		State:     m.State,
		Labels:    m.Labels,
		Image:     m.Image,
		CreatedAt: m.CreatedAt,
		Network:   sandbox.NetworkFull,
	}
}

func (p *Provider) setState(id string, s sandbox.State) error {
	m, err := p.readMeta(id)
	if err != nil {
		return err
	}
	if m.State == s {
		return nil
	}
	m.State = s
	return p.writeMeta(id, m)
}

// Start implements sandbox.Provider.
func (p *Provider) Start(ctx context.Context, h sandbox.Handle) error {
	return p.setState(h.ID, sandbox.StateRunning)
}

// Stop implements sandbox.Provider: running commands are killed, the directory kept.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle) error {
	if _, err := p.readMeta(h.ID); err != nil {
		return err
	}
	p.killAll(h.ID)
	return p.setState(h.ID, sandbox.StateStopped)
}

// Destroy implements sandbox.Provider. A missing sandbox is success.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	if _, err := p.readMeta(h.ID); errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	p.killAll(h.ID)
	if err := os.RemoveAll(filepath.Join(p.dir, h.ID)); err != nil {
		return fmt.Errorf("local destroy %s: %w", h.ID, err)
	}
	return nil
}

// List implements sandbox.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("local list: %w", err)
	}
	var out []sandbox.Info
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		m, err := p.readMeta(e.Name())
		if err != nil {
			continue // half-created or half-destroyed: not a sandbox (yet, or any more)
		}
		if matches(m.Labels, labels) {
			out = append(out, p.info(e.Name(), m))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (p *Provider) track(id string, pgid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.procs[id] == nil {
		p.procs[id] = map[int]struct{}{}
	}
	p.procs[id][pgid] = struct{}{}
}

func (p *Provider) untrack(id string, pgid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.procs[id], pgid)
	if len(p.procs[id]) == 0 {
		delete(p.procs, id)
	}
}

// killAll kills every process group started in the sandbox. The set is copied under the lock and the
// signals sent after it is released.
func (p *Provider) killAll(id string) {
	p.mu.Lock()
	var pgids []int
	for pg := range p.procs[id] {
		pgids = append(pgids, pg)
	}
	p.mu.Unlock()
	for _, pg := range pgids {
		_ = syscall.Kill(-pg, syscall.SIGKILL)
	}
}
