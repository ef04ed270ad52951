package daytonafake

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
)

// box is one fake sandbox.
type box struct {
	id, name, snapshot string
	state              api.SandboxState
	desired            api.SandboxDesiredState
	errorReason        string
	labels, env        map[string]string
	blockAll           bool
	autoStop           int
	created            time.Time
	backend            sandbox.Handle // zero until the backend has made it
	previewToken       string
	sessions           map[string]*session
}

func (f *Fake) routeAPI(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/sandbox", f.createSandbox)
	mux.HandleFunc("GET /api/sandbox", f.listSandboxes)
	mux.HandleFunc("GET /api/sandbox/{id}", f.getSandbox)
	mux.HandleFunc("DELETE /api/sandbox/{id}", f.deleteSandbox)
	mux.HandleFunc("POST /api/sandbox/{id}/start", f.startSandbox)
	mux.HandleFunc("POST /api/sandbox/{id}/stop", f.stopSandbox)
	mux.HandleFunc("GET /api/sandbox/{id}/toolbox-proxy-url", f.toolboxURL)
	mux.HandleFunc("GET /api/sandbox/{id}/ports/{port}/preview-url", f.previewURL)
	mux.HandleFunc("GET /api/snapshots/{id}", f.getSnapshot)
	mux.HandleFunc("GET /api/api-keys/current", f.currentKey)
}

func (f *Fake) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandbox
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.apiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	snap := deref(req.Snapshot)
	if !slices.Contains(f.opts.Snapshots, snap) {
		f.apiError(w, r, http.StatusNotFound, fmt.Sprintf("Snapshot %s not found", snap))
		return
	}
	b := &box{
		id: newID(), snapshot: snap, state: api.SandboxStateCreating, desired: api.SandboxDesiredStateStarted,
		labels: map[string]string{}, env: map[string]string{}, blockAll: deref(req.NetworkBlockAll),
		autoStop: 15, created: time.Now().UTC(), previewToken: newID(), sessions: map[string]*session{},
	}
	b.name = b.id
	if req.Name != nil {
		b.name = *req.Name
	}
	if req.Labels != nil {
		maps.Copy(b.labels, *req.Labels)
	}
	if req.Env != nil {
		maps.Copy(b.env, *req.Env)
	}
	if req.AutoStopInterval != nil {
		b.autoStop = *req.AutoStopInterval
	}
	f.mu.Lock()
	for _, o := range f.boxes {
		if o.name == b.name {
			f.mu.Unlock()
			f.apiError(w, r, http.StatusConflict, fmt.Sprintf("Sandbox with name %s already exists", b.name))
			return
		}
	}
	f.boxes[b.id] = b
	dto := f.dto(b)
	f.mu.Unlock()

	spec := sandbox.Spec{
		Image:  snap,
		Labels: sandbox.Labels{Deployment: f.opts.Deployment, Thread: b.id, Generation: 1},
		Env:    b.env, Network: sandbox.NetworkFull,
	}
	if b.blockAll {
		spec.Network = sandbox.NetworkNone
	}
	f.goBackground(func(ctx context.Context) {
		h, err := f.opts.Backend.Create(ctx, spec)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.boxes[b.id] != b { // deleted meanwhile: the delete could not reach the backend yet
			if err == nil {
				f.goBackground(func(ctx context.Context) { _ = f.opts.Backend.Destroy(ctx, h) })
			}
			return
		}
		if err != nil {
			b.state, b.errorReason = api.SandboxStateError, err.Error()
			return
		}
		b.backend, b.state = h, api.SandboxStateStarted
	})
	writeJSON(w, http.StatusOK, dto)
}

// lookup finds a sandbox by ID or name, answering 404 when there is none.
func (f *Fake) lookup(w http.ResponseWriter, r *http.Request) *box {
	id := r.PathValue("id")
	if b := f.boxes[id]; b != nil {
		return b
	}
	for _, b := range f.boxes {
		if b.name == id {
			return b
		}
	}
	f.apiError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", id))
	return nil
}

func (f *Fake) getSandbox(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	b := f.lookup(w, r)
	if b == nil {
		f.mu.Unlock()
		return
	}
	dto := f.dto(b)
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, dto)
}

func (f *Fake) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want := map[string]string{}
	if l := q.Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			f.apiError(w, r, http.StatusBadRequest, "labels must be a JSON object of strings: "+err.Error())
			return
		}
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		limit, _ = strconv.Atoi(l)
	}
	offset, _ := strconv.Atoi(q.Get("cursor"))
	f.mu.Lock()
	var all []*box
	for _, b := range f.boxes {
		match := true
		for k, v := range want {
			match = match && b.labels[k] == v
		}
		if match {
			all = append(all, b)
		}
	}
	slices.SortFunc(all, func(a, b *box) int { return a.created.Compare(b.created) })
	resp := api.ListSandboxesResponse{Items: []api.SandboxListItem{}}
	for i := offset; i < len(all) && i < offset+limit; i++ {
		d := f.dto(all[i])
		resp.Items = append(resp.Items, api.SandboxListItem{
			Id: d.Id, Name: d.Name, OrganizationId: d.OrganizationId, User: d.User, Labels: d.Labels,
			Public: d.Public, NetworkBlockAll: d.NetworkBlockAll, Target: d.Target, Cpu: d.Cpu, Gpu: d.Gpu,
			Memory: d.Memory, Disk: d.Disk, ToolboxProxyUrl: d.ToolboxProxyUrl, State: d.State,
			DesiredState: d.DesiredState, ErrorReason: d.ErrorReason, Snapshot: d.Snapshot,
			CreatedAt: d.CreatedAt, AutoStopInterval: d.AutoStopInterval,
		})
	}
	f.mu.Unlock()
	if offset+limit < len(all) {
		next := strconv.Itoa(offset + limit)
		resp.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, resp)
}

// transition starts a state change: it answers 409 while another is in flight (Daytona's "state
// change in progress"), then runs do in the background and settles on the final state.
func (f *Fake) transition(w http.ResponseWriter, r *http.Request, via api.SandboxState, desired api.SandboxDesiredState,
	allowed []api.SandboxState, noop api.SandboxState, wrongMsg string, do func(ctx context.Context, h sandbox.Handle) error, final api.SandboxState) {
	f.mu.Lock()
	b := f.lookup(w, r)
	if b == nil {
		f.mu.Unlock()
		return
	}
	if string(b.state) != string(b.desired) && b.state != api.SandboxStateError {
		f.mu.Unlock()
		f.apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
		return
	}
	if b.state == noop {
		dto := f.dto(b)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, dto)
		return
	}
	if !slices.Contains(allowed, b.state) {
		f.mu.Unlock()
		f.apiError(w, r, http.StatusBadRequest, wrongMsg)
		return
	}
	b.state, b.desired = via, desired
	h := b.backend
	dto := f.dto(b)
	hold := f.hold
	if hold != nil {
		select {
		case f.held <- b.id:
		default:
		}
	}
	f.mu.Unlock()
	f.goBackground(func(ctx context.Context) {
		if hold != nil {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
		var err error
		if !h.IsZero() {
			err = do(ctx, h)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case err != nil:
			b.state, b.errorReason = api.SandboxStateError, err.Error()
		case final == api.SandboxStateDestroyed:
			if f.boxes[b.id] == b {
				delete(f.boxes, b.id)
			}
		default:
			b.state = final
		}
	})
	writeJSON(w, http.StatusOK, dto)
}

func (f *Fake) startSandbox(w http.ResponseWriter, r *http.Request) {
	f.transition(w, r, api.SandboxStateStarting, api.SandboxDesiredStateStarted,
		[]api.SandboxState{api.SandboxStateStopped, api.SandboxStateArchived}, api.SandboxStateStarted,
		"Sandbox is not in valid state", f.opts.Backend.Start, api.SandboxStateStarted)
}

func (f *Fake) stopSandbox(w http.ResponseWriter, r *http.Request) {
	f.transition(w, r, api.SandboxStateStopping, api.SandboxDesiredStateStopped,
		[]api.SandboxState{api.SandboxStateStarted}, "",
		"Sandbox is not in a stoppable state", f.opts.Backend.Stop, api.SandboxStateStopped)
}

func (f *Fake) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	f.transition(w, r, api.SandboxStateDestroying, api.SandboxDesiredStateDestroyed,
		[]api.SandboxState{api.SandboxStateStarted, api.SandboxStateStopped, api.SandboxStateArchived, api.SandboxStateError}, "",
		"", f.opts.Backend.Destroy, api.SandboxStateDestroyed)
}

func (f *Fake) toolboxURL(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	b := f.lookup(w, r)
	f.mu.Unlock()
	if b != nil {
		writeJSON(w, http.StatusOK, api.ToolboxProxyUrl{Url: f.srv.URL + "/toolbox"})
	}
}

func (f *Fake) previewURL(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	b := f.lookup(w, r)
	var token string
	if b != nil {
		token = b.previewToken
	}
	f.mu.Unlock()
	if b == nil {
		return
	}
	// The real link is {port}-{id}.{proxyDomain}; a path keeps the fake on one listener.
	writeJSON(w, http.StatusOK, api.PortPreviewUrl{
		SandboxId: b.id, Token: token, Url: fmt.Sprintf("%s/preview/%s-%s", f.srv.URL, r.PathValue("port"), b.id),
	})
}

func (f *Fake) getSnapshot(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("id")
	if !slices.Contains(f.opts.Snapshots, name) {
		f.apiError(w, r, http.StatusNotFound, fmt.Sprintf("Snapshot %s not found", name))
		return
	}
	now := time.Now().UTC()
	writeJSON(w, http.StatusOK, api.SnapshotDto{
		Id: name, Name: name, ImageName: &name, State: api.SnapshotStateActive, Cpu: 1, Mem: 1, Disk: 3,
		CreatedAt: now, UpdatedAt: now,
	})
}

func (f *Fake) currentKey(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.ApiKeyList{
		Name: "fake", CreatedAt: time.Now().UTC(), UserId: "fake-user", Value: "dtn_****",
		Permissions: []api.ApiKeyListPermissions{api.WRITESANDBOXES, api.DELETESANDBOXES},
	})
}

// dto renders b as the API does. The caller holds f.mu.
func (f *Fake) dto(b *box) api.Sandbox {
	state, desired := b.state, b.desired
	created := b.created.Format(time.RFC3339Nano)
	autoStop := float32(b.autoStop)
	d := api.Sandbox{
		Id: b.id, Name: b.name, OrganizationId: "fake-org", User: "daytona", Env: maps.Clone(b.env),
		Labels: maps.Clone(b.labels), NetworkBlockAll: b.blockAll, Target: "us", Cpu: 1, Memory: 1, Disk: 3,
		ToolboxProxyUrl: f.srv.URL + "/toolbox", State: &state, DesiredState: &desired, Snapshot: &b.snapshot,
		CreatedAt: &created, AutoStopInterval: &autoStop,
	}
	if f.opts.OmitToolboxURL {
		d.ToolboxProxyUrl = ""
	}
	if b.errorReason != "" {
		reason := b.errorReason
		d.ErrorReason = &reason
	}
	return d
}

// StopOutOfBand stops a sandbox behind the client's back (Daytona's auto-stop, or the dashboard).
func (f *Fake) StopOutOfBand(ctx context.Context, id string) error {
	f.mu.Lock()
	b := f.boxes[id]
	f.mu.Unlock()
	if b == nil {
		return fmt.Errorf("daytonafake: no sandbox %s", id)
	}
	if err := f.opts.Backend.Stop(ctx, b.backend); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b.state, b.desired = api.SandboxStateStopped, api.SandboxDesiredStateStopped
	return nil
}

// RemoveOutOfBand deletes a sandbox behind the client's back (auto-delete, or the dashboard).
func (f *Fake) RemoveOutOfBand(ctx context.Context, id string) error {
	f.mu.Lock()
	b := f.boxes[id]
	delete(f.boxes, id)
	f.mu.Unlock()
	if b == nil {
		return fmt.Errorf("daytonafake: no sandbox %s", id)
	}
	return f.opts.Backend.Destroy(ctx, b.backend)
}

// ExpirePreviewToken replaces a sandbox's preview token: links handed out so far answer 401.
func (f *Fake) ExpirePreviewToken(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		b.previewToken = newID()
	}
}

// HoldTransitions keeps every state change started from now on in flight (stopping, starting,
// destroying) until release is called, so that a test can meet Daytona's 409. held receives the
// sandbox ID of each transition held.
func (f *Fake) HoldTransitions() (held <-chan string, release func()) {
	ch := make(chan struct{})
	ids := make(chan string, 64)
	f.mu.Lock()
	f.hold, f.held = ch, ids
	f.mu.Unlock()
	return ids, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.hold == ch {
			f.hold = nil
		}
		close(ch)
	}
}

// State reports a sandbox's state ("" when there is none).
func (f *Fake) State(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		return string(b.state)
	}
	return ""
}

// Count reports how many sandboxes the fake holds (in any state).
func (f *Fake) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.boxes)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
