// Package sandboxfake is an in-memory sandbox.Provider for tests of code above the provider seam (the
// resolver's table tests, the pool's scale benchmark). It is not a stand-in for a real provider's
// behaviour: real providers are tested against real engines (or faithful API fakes) by sandboxtest.
//
// Commands are Go functions: Exec calls the registered ExecFunc. Failures are injected per method.
package sandboxfake

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/threadbox/threadbox/sandbox"
)

// ExecFunc runs a command in the fake; it writes output to req.Stdout/Stderr and returns the result.
type ExecFunc func(ctx context.Context, b *Box, req sandbox.ExecRequest) (sandbox.ExecResult, error)

// Box is one fake sandbox.
type Box struct {
	ID      string
	Spec    sandbox.Spec
	State   sandbox.State
	Files   map[string][]byte // absolute path → content
	Created time.Time
}

// Provider is the fake. The zero value is not usable; call New.
type Provider struct {
	// Exec handles commands; nil answers every command with exit 0 and no output.
	Exec_ ExecFunc

	// mu protects the following.
	mu    sync.Mutex
	boxes map[string]*Box
	seq   int
	fail  map[string][]error // method → errors to return, in order
	calls map[string]int
	now   func() time.Time
	name  string
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns an empty fake, named "fake".
func New() *Provider { return NewNamed("fake") }

// NewNamed returns an empty fake under another name, so that a test can enable several providers.
func NewNamed(name string) *Provider {
	return &Provider{boxes: map[string]*Box{}, fail: map[string][]error{}, calls: map[string]int{}, now: time.Now, name: name}
}

// SetClock makes Create stamp boxes with now() (for reaper tests).
func (p *Provider) SetClock(now func() time.Time) { p.mu.Lock(); p.now = now; p.mu.Unlock() }

// FailNext makes the next call of method ("Create", "Start", …) return err; repeated calls queue.
func (p *Provider) FailNext(method string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[method] = append(p.fail[method], err)
}

// Calls reports how often method was called.
func (p *Provider) Calls(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// Box returns a copy of the box's public state, or nil.
func (p *Provider) Box(id string) *Box {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.boxes[id]
	if b == nil {
		return nil
	}
	c := *b
	return &c
}

// Len is the number of existing boxes.
func (p *Provider) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.boxes)
}

// RemoveOutOfBand deletes a box behind the provider's back (docker rm -f).
func (p *Provider) RemoveOutOfBand(id string) { p.mu.Lock(); delete(p.boxes, id); p.mu.Unlock() }

// StopOutOfBand stops a box behind the provider's back (docker stop).
func (p *Provider) StopOutOfBand(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.boxes[id]; b != nil {
		b.State = sandbox.StateStopped
	}
}

// SetState sets a box's state behind the provider's back (a provider reporting it failed, say).
func (p *Provider) SetState(id string, st sandbox.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.boxes[id]; b != nil {
		b.State = st
	}
}

// enter counts the call and pops an injected failure.
func (p *Provider) enterLocked(method string) error {
	p.calls[method]++
	if q := p.fail[method]; len(q) > 0 {
		p.fail[method] = q[1:]
		return q[0]
	}
	return nil
}

func (p *Provider) boxLocked(method string, h sandbox.Handle) (*Box, error) {
	if err := p.enterLocked(method); err != nil {
		return nil, err
	}
	b := p.boxes[h.ID]
	if b == nil {
		return nil, fmt.Errorf("fake %s %s: %w", method, h.ID, sandbox.ErrNotFound)
	}
	return b, nil
}

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return p.name }

// Capabilities implements sandbox.Provider.
func (p *Provider) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Isolated: true, OutOfBand: true}
}

// Create implements sandbox.Provider.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return sandbox.Handle{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.enterLocked("Create"); err != nil {
		return sandbox.Handle{}, err
	}
	p.seq++
	id := fmt.Sprintf("fake-%d", p.seq)
	p.boxes[id] = &Box{ID: id, Spec: spec, State: sandbox.StateRunning, Files: map[string][]byte{}, Created: p.now()}
	return sandbox.Handle{Provider: p.name, ID: id, Version: 1}, nil
}

// Inspect implements sandbox.Provider.
func (p *Provider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.boxLocked("Inspect", h)
	if err != nil {
		return sandbox.Info{}, err
	}
	return p.infoLocked(b), nil
}

func (p *Provider) infoLocked(b *Box) sandbox.Info {
	return sandbox.Info{
		Handle: sandbox.Handle{Provider: p.name, ID: b.ID, Version: 1}, State: b.State,
		Labels: b.Spec.Labels.Map(), Image: b.Spec.Image, CreatedAt: b.Created,
		Resources: b.Spec.Resources, User: b.Spec.User, Network: b.Spec.Network,
	}
}

func (p *Provider) setState(method string, h sandbox.Handle, s sandbox.State) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.boxLocked(method, h)
	if err != nil {
		return err
	}
	b.State = s
	return nil
}

// Start implements sandbox.Provider.
func (p *Provider) Start(ctx context.Context, h sandbox.Handle) error {
	return p.setState("Start", h, sandbox.StateRunning)
}

// Stop implements sandbox.Provider.
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle) error {
	return p.setState("Stop", h, sandbox.StateStopped)
}

// Destroy implements sandbox.Provider; a missing box is success.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.enterLocked("Destroy"); err != nil {
		return err
	}
	delete(p.boxes, h.ID)
	return nil
}

// List implements sandbox.Provider.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.enterLocked("List"); err != nil {
		return nil, err
	}
	var out []sandbox.Info
	for _, b := range p.boxes {
		m := b.Spec.Labels.Map()
		ok := true
		for k, v := range labels {
			ok = ok && m[k] == v
		}
		if ok {
			out = append(out, p.infoLocked(b))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Handle.ID < out[j].Handle.ID })
	return out, nil
}

// Exec implements sandbox.Provider by calling Exec_.
func (p *Provider) Exec(ctx context.Context, h sandbox.Handle, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	p.mu.Lock()
	b, err := p.boxLocked("Exec", h)
	if err == nil && b.State != sandbox.StateRunning {
		err = fmt.Errorf("fake exec %s: %w", h.ID, sandbox.ErrNotRunning)
	}
	f := p.Exec_
	p.mu.Unlock()
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	if f == nil {
		return sandbox.ExecResult{}, nil
	}
	return f(ctx, b, req)
}

func (p *Provider) abs(b *Box, name string) string {
	if !path.IsAbs(name) {
		name = path.Join(b.Spec.WorkDir, name)
	}
	return path.Clean(name)
}

// WriteFile implements sandbox.Provider.
func (p *Provider) WriteFile(ctx context.Context, h sandbox.Handle, name string, data []byte, mode fs.FileMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.boxLocked("WriteFile", h)
	if err != nil {
		return err
	}
	b.Files[p.abs(b, name)] = append([]byte(nil), data...)
	return nil
}

// ReadFile implements sandbox.Provider.
func (p *Provider) ReadFile(ctx context.Context, h sandbox.Handle, name string, max int64) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.boxLocked("ReadFile", h)
	if err != nil {
		return nil, err
	}
	data, ok := b.Files[p.abs(b, name)]
	if !ok {
		return nil, fmt.Errorf("fake read %s: %w", name, fs.ErrNotExist) // the path, not the sandbox
	}
	if max <= 0 {
		max = sandbox.DefaultMaxOutput
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("fake read %s: %w", name, sandbox.ErrFileTooLarge)
	}
	return append([]byte(nil), data...), nil
}

// ListFiles implements sandbox.Provider.
func (p *Provider) ListFiles(ctx context.Context, h sandbox.Handle, dir string) ([]sandbox.FileInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.boxLocked("ListFiles", h)
	if err != nil {
		return nil, err
	}
	prefix := p.abs(b, dir) + "/"
	var out []sandbox.FileInfo
	for name, data := range b.Files {
		if strings.HasPrefix(name, prefix) {
			if len(out) == sandbox.MaxListEntries {
				return nil, fmt.Errorf("fake list %s: more than %d entries: %w", dir, sandbox.MaxListEntries, sandbox.ErrTooLarge)
			}
			out = append(out, sandbox.FileInfo{Path: strings.TrimPrefix(name, prefix), Size: int64(len(data)), Mode: 0o644})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}
