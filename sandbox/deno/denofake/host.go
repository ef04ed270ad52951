package denofake

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/threadbox/threadbox/sandbox"
)

// box is one Deno sandbox.
type box struct {
	id, region string
	labels     map[string]string
	createdAt  time.Time
	stoppedAt  time.Time
	status     string // running | stopped
	stopAt     time.Time
	root       *volume // nil when booted from a snapshot (read-only overlay)
	backend    sandbox.Handle
	env        map[string]string
	conns      map[*conn]bool
	exposed    int
	allowNet   *[]string // nil: open network (the backend is network none regardless)
	domains    map[string]bool
	procs      map[int]*proc
	pidSeq     int
	procCtx    context.Context // cancelled when the sandbox dies: its processes end
	procStop   context.CancelFunc
	dead       chan struct{} // closed once the backend is gone and the volume detached
	deadOnce   sync.Once
}

func (f *Fake) routeHost(mux *http.ServeMux) {
	mux.HandleFunc("GET /host/{region}/api/v3/sandboxes/create", f.create)
	mux.HandleFunc("GET /host/{region}/api/v3/sandbox/{id}/connect", f.connect)
	mux.HandleFunc("DELETE /host/{region}/api/v3/sandbox/{id}", f.kill)
	mux.HandleFunc("PATCH /host/{region}/api/v3/sandbox/{id}", f.extend)
	mux.HandleFunc("POST /host/{region}/api/v3/sandbox/{id}/expose/http", f.exposeHTTP)
	mux.HandleFunc("POST /host/{region}/api/v3/sandbox/{id}/expose/ssh", f.exposeSSH)
}

// sandboxConfig is the x-deno-sandbox-config header (cloud-apis.md §2.4).
type sandboxConfig struct {
	StopAtMs *int64            `json:"stop_at_ms,omitempty"`
	MemoryMB *int              `json:"memory_mb"`
	Labels   map[string]string `json:"labels,omitempty"`
	Root     *struct {
		Volume string `json:"volume"`
	} `json:"root,omitempty"`
	Volumes []struct {
		Volume string `json:"volume"`
		Path   string `json:"path"`
	} `json:"volumes"`
	AllowNet *[]string      `json:"allow_net,omitempty"`
	Secrets  map[string]any `json:"secrets,omitempty"`
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// hostBox finds the running or stopped sandbox named in the path, checking the region in the URL.
func (f *Fake) hostBox(w http.ResponseWriter, r *http.Request) *box {
	id := r.PathValue("id")
	f.mu.Lock()
	b := f.boxes[id]
	f.mu.Unlock()
	if b == nil {
		apiError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("sandbox %s not found", id))
		return nil
	}
	if r.PathValue("region") != b.region {
		apiError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("sandbox %s is not in region %s", id, r.PathValue("region")))
		return nil
	}
	return b
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpCreateSandbox)
	if !ok {
		return
	}
	defer done()
	region := r.PathValue("region")
	if !validRegion(region) {
		apiError(w, http.StatusNotFound, "INVALID_REGION", fmt.Sprintf("no sandbox host in region %q", region))
		return
	}
	raw, err := base64.StdEncoding.DecodeString(r.Header.Get("x-deno-sandbox-config"))
	var cfg sandboxConfig
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(&cfg)
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_CONFIG", fmt.Sprintf("x-deno-sandbox-config: %v", err))
		return
	}
	b, status, code, msg := f.boot(r.Context(), region, cfg)
	if b == nil {
		apiError(w, status, code, msg)
		return
	}
	f.serveSocket(w, r, b)
}

// boot validates a config, reserves the root volume and starts the backend sandbox.
func (f *Fake) boot(ctx context.Context, region string, cfg sandboxConfig) (*box, int, string, string) {
	bad := func(code, format string, args ...any) (*box, int, string, string) {
		return nil, http.StatusBadRequest, code, fmt.Sprintf(format, args...)
	}
	now := f.now()
	switch {
	case cfg.MemoryMB == nil:
		return bad("INVALID_CONFIG", "memory_mb is required")
	case *cfg.MemoryMB < 768 || *cfg.MemoryMB > 4096:
		return bad("INVALID_CONFIG", "memory_mb %d: must be between 768 and 4096", *cfg.MemoryMB)
	case cfg.Volumes == nil:
		return bad("INVALID_CONFIG", "volumes is required (an empty list when none)")
	case len(cfg.Labels) > 5:
		return bad("TOO_MANY_LABELS", "%d labels: at most 5", len(cfg.Labels))
	case cfg.StopAtMs != nil && (time.UnixMilli(*cfg.StopAtMs).Before(now) || time.UnixMilli(*cfg.StopAtMs).After(now.Add(Lifetime))):
		return bad("INVALID_CONFIG", "stop_at_ms: must be in the next %s", Lifetime)
	case cfg.StopAtMs == nil:
		// The "session" timeout: the sandbox dies with its creating connection. Threadbox never uses it,
		// and the fake does not model it: refuse, so a client that forgets stop_at_ms notices.
		return bad("UNSUPPORTED", "denofake models duration timeouts only: send stop_at_ms")
	}
	for k, v := range cfg.Labels {
		if len(k) == 0 || len(k) > 64 || len(v) > 128 {
			return bad("INVALID_LABEL", "label %q: key 1-64 bytes, value at most 128 bytes", k)
		}
	}
	if len(cfg.Volumes) > 0 {
		return bad("UNSUPPORTED", "denofake does not model extra volumes")
	}
	b := &box{id: newSandboxID(region), region: region, labels: cfg.Labels, createdAt: now, status: "running", allowNet: cfg.AllowNet,
		stopAt: time.UnixMilli(*cfg.StopAtMs), env: map[string]string{}, conns: map[*conn]bool{}, dead: make(chan struct{}),
		domains: map[string]bool{}, procs: map[int]*proc{}}
	if b.labels == nil {
		b.labels = map[string]string{}
	}
	var data []byte
	f.mu.Lock()
	if f.opts.MaxRunning > 0 {
		running := 0
		for _, x := range f.boxes {
			if x.status == "running" {
				running++
			}
		}
		if running >= f.opts.MaxRunning {
			f.mu.Unlock()
			return nil, http.StatusTooManyRequests, "SANDBOX_LIMIT_EXCEEDED",
				fmt.Sprintf("concurrent sandbox limit reached (%d running)", running)
		}
	}
	if cfg.Root != nil {
		if v := f.volumeLocked(cfg.Root.Volume); v != nil {
			switch {
			case v.region != region:
				f.mu.Unlock()
				return bad("INVALID_ROOT", "volume %s is in region %s, not %s", v.slug, v.region, region)
			case !v.bootable:
				f.mu.Unlock()
				return bad("INVALID_ROOT", "volume %s is not bootable", v.slug)
			case v.attached != "":
				f.mu.Unlock()
				return nil, http.StatusConflict, "VOLUME_IN_USE", fmt.Sprintf("volume %s is attached to sandbox %s", v.slug, v.attached)
			}
			v.attached, b.root, data = b.id, v, v.data
		} else if s := f.snapshotLocked(cfg.Root.Volume); s != nil && s.bootable && s.region == region {
			// Booting straight from a snapshot is a read-only overlay that hides what was installed
			// into it (seed 001): the sandbox starts empty and nothing it writes is kept.
		} else {
			f.mu.Unlock()
			return nil, http.StatusNotFound, "VOLUME_NOT_FOUND", fmt.Sprintf("root %q: no such bootable volume or snapshot in %s", cfg.Root.Volume, region)
		}
	}
	f.boxes[b.id] = b // counted as running from now on
	f.mu.Unlock()

	fail := func(err error) (*box, int, string, string) {
		f.mu.Lock()
		delete(f.boxes, b.id)
		if b.root != nil {
			b.root.attached = ""
		}
		f.mu.Unlock()
		return nil, http.StatusInternalServerError, "INTERNAL_SERVER_ERROR", err.Error()
	}
	mem := *cfg.MemoryMB
	res := sandbox.DefaultResources()
	res.MemoryMB = mem
	h, err := f.opts.Backend.Create(ctx, sandbox.Spec{
		Image:   f.opts.Image,
		Labels:  sandbox.Labels{Deployment: f.opts.Deployment, Thread: b.id, Generation: 1},
		Network: sandbox.NetworkNone, Resources: res,
	})
	if err != nil {
		return fail(fmt.Errorf("boot: %w", err))
	}
	b.backend = h
	if len(data) > 0 {
		res, err := f.opts.Backend.Exec(ctx, h, sandbox.ExecRequest{Cmd: []string{"tar", "xf", "-", "-C", "/workspace"}, Stdin: bytes.NewReader(data)})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("unpack the root volume: tar exit %d", res.ExitCode)
		}
		if err != nil {
			_ = f.opts.Backend.Destroy(context.WithoutCancel(ctx), h)
			return fail(err)
		}
	}
	b.procCtx, b.procStop = context.WithCancel(f.ctx)
	return b, 0, "", ""
}

func (f *Fake) connect(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpConnect)
	if !ok {
		return
	}
	defer done()
	b := f.hostBox(w, r)
	if b == nil {
		return
	}
	f.mu.Lock()
	running := b.status == "running"
	f.mu.Unlock()
	if !running {
		apiError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("sandbox %s is stopped", b.id))
		return
	}
	f.serveSocket(w, r, b)
}

func (f *Fake) kill(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpKill)
	if !ok {
		return
	}
	defer done()
	b := f.hostBox(w, r)
	if b == nil {
		return
	}
	f.stop(b)
	w.WriteHeader(http.StatusOK)
}

func (f *Fake) extend(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpExtend)
	if !ok {
		return
	}
	defer done()
	var req struct {
		StopAtMs int64 `json:"stop_at_ms"`
	}
	if err := decodeStrict(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", err.Error())
		return
	}
	b := f.hostBox(w, r)
	if b == nil {
		return
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.status != "running" {
		apiError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("sandbox %s is stopped", b.id))
		return
	}
	want := time.UnixMilli(req.StopAtMs)
	if !want.After(now) {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", "stop_at_ms is in the past")
		return
	}
	// At most +30 minutes per call: the deadline granted may be earlier than asked for.
	b.stopAt = minTime(want, now.Add(Lifetime))
	writeJSON(w, http.StatusOK, map[string]int64{"stop_at_ms": b.stopAt.UnixMilli()})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (f *Fake) exposeHTTP(w http.ResponseWriter, r *http.Request) {
	f.expose(w, r, OpExposeHTTP, func(b *box, n int) any {
		return map[string]string{"domain": fmt.Sprintf("%s-%d.sandbox.deno.net", strings.ReplaceAll(b.id, "_", "-"), n)}
	})
}

func (f *Fake) exposeSSH(w http.ResponseWriter, r *http.Request) {
	f.expose(w, r, OpExposeSSH, func(b *box, n int) any {
		return map[string]string{"hostname": "ssh." + b.region + ".sandbox.deno.net", "username": strings.ToLower(newResID("app"))}
	})
}

func (f *Fake) expose(w http.ResponseWriter, r *http.Request, op string, answer func(*box, int) any) {
	done, ok := f.op(w, op)
	if !ok {
		return
	}
	defer done()
	var req struct{}
	if err := decodeStrict(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", err.Error())
		return
	}
	b := f.hostBox(w, r)
	if b == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.status != "running" {
		apiError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("sandbox %s is stopped", b.id))
		return
	}
	b.exposed++
	a := answer(b, b.exposed)
	if m, ok := a.(map[string]string); ok && m["domain"] != "" {
		b.domains[m["domain"]] = true
	}
	writeJSON(w, http.StatusOK, a)
}

// stop kills a sandbox (kill, expiry or out of band): it is stopped at once, its sockets close, and
// in the background its /workspace is saved into its root volume, the backend removed and the volume
// detached. Stopping a stopped sandbox does nothing.
func (f *Fake) stop(b *box) {
	f.mu.Lock()
	if b.status != "running" {
		f.mu.Unlock()
		return
	}
	b.status, b.stoppedAt = "stopped", f.now()
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	if b.procStop != nil {
		b.procStop()
	}
	for _, c := range conns {
		c.close(websocket.CloseNormalClosure, "sandbox stopped")
	}
	f.goBackground(func(ctx context.Context) { f.teardown(ctx, b) })
}

// teardown saves the work, removes the backend and detaches the root volume.
func (f *Fake) teardown(ctx context.Context, b *box) {
	defer b.deadOnce.Do(func() { close(b.dead) })
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var saved []byte
	if b.root != nil && !b.backend.IsZero() {
		var out bytes.Buffer
		res, err := f.opts.Backend.Exec(ctx, b.backend, sandbox.ExecRequest{Cmd: []string{"tar", "cf", "-", "-C", "/workspace", "."}, Stdout: &out, MaxOutput: 1 << 40})
		if err != nil || res.ExitCode != 0 {
			f.t.Logf("denofake: save %s: exit %d, %v", b.id, res.ExitCode, err)
		}
		if err == nil {
			saved = out.Bytes()
		}
	}
	if !b.backend.IsZero() {
		if err := f.opts.Backend.Destroy(ctx, b.backend); err != nil {
			f.t.Logf("denofake: destroy backend of %s: %v", b.id, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b.backend = sandbox.Handle{}
	if b.root != nil {
		if saved != nil {
			b.root.data = saved
		}
		b.root.attached = ""
	}
}

// expireDue stops every running sandbox whose deadline has passed.
func (f *Fake) expireDue() {
	now := f.now()
	f.mu.Lock()
	var due []*box
	for _, b := range f.boxes {
		if b.status == "running" && !now.Before(b.stopAt) {
			due = append(due, b)
		}
	}
	f.mu.Unlock()
	for _, b := range due {
		f.stop(b)
	}
}

// StopOutOfBand kills a sandbox as if it died on its own, and waits until its volume is detached.
func (f *Fake) StopOutOfBand(id string) {
	f.mu.Lock()
	b := f.boxes[id]
	f.mu.Unlock()
	if b == nil {
		return
	}
	f.stop(b)
	<-b.dead
}

// WaitDetached waits until a killed sandbox's backend is gone and its volume detached.
func (f *Fake) WaitDetached(ctx context.Context, id string) error {
	f.mu.Lock()
	b := f.boxes[id]
	f.mu.Unlock()
	if b == nil {
		return nil
	}
	select {
	case <-b.dead:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RemoveOutOfBand deletes everything whose slug starts with prefix and every sandbox carrying label
// key=value, as an operator would in the dashboard.
func (f *Fake) RemoveOutOfBand(key, value, prefix string) {
	f.mu.Lock()
	var boxes []*box
	for _, b := range f.boxes {
		if b.labels[key] == value {
			boxes = append(boxes, b)
		}
	}
	f.mu.Unlock()
	for _, b := range boxes {
		f.stop(b)
		<-b.dead
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range boxes {
		delete(f.boxes, b.id)
	}
	for id, v := range f.volumes {
		if strings.HasPrefix(v.slug, prefix) {
			delete(f.volumes, id)
		}
	}
	for id, s := range f.snapshots {
		if strings.HasPrefix(s.slug, prefix) {
			delete(f.snapshots, id)
		}
	}
}

// Running reports how many sandboxes are running.
func (f *Fake) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, b := range f.boxes {
		if b.status == "running" {
			n++
		}
	}
	return n
}

// Deadline reports a sandbox's current deadline.
func (f *Fake) Deadline(id string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		return b.stopAt.UTC()
	}
	return time.Time{}
}

// SandboxIDs returns the running sandboxes carrying label key=value.
func (f *Fake) SandboxIDs(key, value string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, b := range f.boxes {
		if b.status == "running" && b.labels[key] == value {
			ids = append(ids, id)
		}
	}
	return ids
}

// AllowNet reports the allow_net a sandbox was booted with (nil: none sent, the network is open).
func (f *Fake) AllowNet(id string) *[]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		return b.allowNet
	}
	return nil
}
