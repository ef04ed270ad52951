package deno

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/sandbox"
)

// Wire types of the console (cloud-apis.md §2.2).
type (
	sandboxRec struct {
		ID        string            `json:"id"`
		CreatedAt time.Time         `json:"createdAt"`
		StoppedAt *time.Time        `json:"stoppedAt"`
		Region    string            `json:"region"`
		Status    string            `json:"status"`
		Labels    map[string]string `json:"labels"`
	}
	volumeRec struct {
		ID       string `json:"id"`
		Slug     string `json:"slug"`
		Region   string `json:"region"`
		Bootable bool   `json:"is_bootable"`
		Base     *struct {
			ID   string `json:"id"`
			Slug string `json:"slug"`
		} `json:"base_snapshot"`
	}
	snapshotRec struct {
		ID       string `json:"id"`
		Slug     string `json:"slug"`
		Region   string `json:"region"`
		Bootable bool   `json:"is_bootable"`
	}
)

// numbered is a volume or snapshot of a box, by its number.
type numbered struct {
	n    int
	slug string
	ok   bool // bootable
}

// boxState is what Deno holds for one box.
type boxState struct {
	id        string
	running   *sandboxRec // the running sandbox, if any
	latest    *sandboxRec // the newest sandbox of any state (labels, createdAt)
	volumes   []numbered  // ascending
	snapshots []numbered  // ascending
}

func (b boxState) exists() bool { return len(b.volumes)+len(b.snapshots) > 0 || b.running != nil }

func (b boxState) lastVolume() *numbered {
	if len(b.volumes) == 0 {
		return nil
	}
	return &b.volumes[len(b.volumes)-1]
}

func (b boxState) lastSnapshot() *numbered {
	for i := len(b.snapshots) - 1; i >= 0; i-- {
		if b.snapshots[i].ok {
			return &b.snapshots[i]
		}
	}
	return nil
}

func (b boxState) next() int {
	n := 0
	for _, x := range append(append([]numbered{}, b.volumes...), b.snapshots...) {
		n = max(n, x.n)
	}
	return n + 1
}

// listSandboxes asks the console for the sandboxes carrying labels. Unlike the volume and snapshot
// lists, Deno does not page this one (cloud-apis.md §2.2: one JSON array, no limit, cursor or Link),
// so there is nothing to follow: the answer is read whole, up to maxAnswer (tens of thousands of
// entries). The label filter is the console's, so the answer grows with the sandboxes of one
// deployment (or one box), stopped ones included; past the bound the error says so (ErrTooLarge)
// rather than failing as bad JSON.
func (p *Provider) listSandboxes(ctx context.Context, labels map[string]string) ([]sandboxRec, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Set("labels["+k+"]", v)
	}
	var recs []sandboxRec
	if _, err := p.do(ctx, "list sandboxes", http.MethodGet, p.console("/api/v2/sandboxes", q), nil, &recs, true, p.opts.RequestTimeout); err != nil {
		if errors.Is(err, sandbox.ErrTooLarge) {
			return nil, fmt.Errorf("%w (Deno's sandbox list is not paged: the deployment's sandbox history outgrew what is read at once)", err)
		}
		return nil, err
	}
	// The filter is checked again here: Destroy kills and the reaper removes what this returns, so
	// a console that answered with more must not hand us others' sandboxes.
	kept := recs[:0]
	for _, r := range recs {
		if hasLabels(r.Labels, labels) {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// storage lists the volumes and snapshots whose slug starts with prefix, grouped by box. Deno's
// search matches anywhere in the slug (and is the console's to honour): the prefix is checked here.
func (p *Provider) storage(ctx context.Context, prefix string) (map[string]*boxState, error) {
	q := url.Values{"search": {prefix}, "limit": {"100"}}
	vols, err := listAll[volumeRec](ctx, p, "list volumes", "/api/v2/volumes", q)
	if err != nil {
		return nil, err
	}
	snaps, err := listAll[snapshotRec](ctx, p, "list snapshots", "/api/v2/snapshots", q)
	if err != nil {
		return nil, err
	}
	boxes := map[string]*boxState{}
	get := func(id string) *boxState {
		if boxes[id] == nil {
			boxes[id] = &boxState{id: id}
		}
		return boxes[id]
	}
	for _, v := range vols {
		if id, kind, n, ok := parseSlug(v.Slug); ok && kind == 'v' && strings.HasPrefix(v.Slug, prefix) {
			b := get(id)
			b.volumes = append(b.volumes, numbered{n: n, slug: v.Slug, ok: v.Bootable})
		}
	}
	for _, s := range snaps {
		if id, kind, n, ok := parseSlug(s.Slug); ok && kind == 's' && strings.HasPrefix(s.Slug, prefix) {
			b := get(id)
			b.snapshots = append(b.snapshots, numbered{n: n, slug: s.Slug, ok: s.Bootable})
		}
	}
	for _, b := range boxes {
		sort.Slice(b.volumes, func(i, j int) bool { return b.volumes[i].n < b.volumes[j].n })
		sort.Slice(b.snapshots, func(i, j int) bool { return b.snapshots[i].n < b.snapshots[j].n })
	}
	return boxes, nil
}

// find reads one box's state from Deno.
func (p *Provider) find(ctx context.Context, id string) (boxState, error) {
	recs, err := p.listSandboxes(ctx, map[string]string{LabelBox: id})
	if err != nil {
		return boxState{}, err
	}
	boxes, err := p.storage(ctx, id+"-")
	if err != nil {
		return boxState{}, err
	}
	b := boxState{id: id}
	if x := boxes[id]; x != nil {
		b = *x
	}
	p.attach(&b, recs)
	return b, nil
}

func (p *Provider) attach(b *boxState, recs []sandboxRec) {
	for i := range recs {
		r := &recs[i]
		if r.Labels[LabelBox] != b.id {
			continue
		}
		if b.latest == nil || r.CreatedAt.After(b.latest.CreatedAt) {
			b.latest = r
		}
		if r.Status == "running" && (b.running == nil || r.CreatedAt.After(b.running.CreatedAt)) {
			b.running = r
		}
	}
}

// Create implements sandbox.Provider: a volume from the base snapshot, then a sandbox booted from it.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return sandbox.Handle{}, err
	}
	if err := p.checkEnvValues(spec.Env); err != nil {
		return sandbox.Handle{}, err
	}
	root := spec.Image
	if !validRoot(root) {
		root = p.opts.BaseSnapshot
	}
	if root == "" {
		return sandbox.Handle{}, fmt.Errorf("%w: image %q is not a Deno snapshot and no base snapshot is set (sandbox.deno.base_snapshot)", sandbox.ErrInvalidSpec, spec.Image)
	}
	if len(spec.Mounts) > 0 {
		return sandbox.Handle{}, fmt.Errorf("%w: deno sandboxes cannot bind host paths: %w", sandbox.ErrInvalidSpec, sandbox.ErrUnsupported)
	}
	labels := spec.Labels.Map()
	id := newBoxID(spec.Labels.Deployment, p.clock.Now())
	labels[LabelBox] = id
	labels[LabelImage] = spec.Image
	for k, v := range labels {
		if len(k) > 64 || len(v) > 128 {
			return sandbox.Handle{}, fmt.Errorf("%w: label %s: Deno allows keys of 64 bytes and values of 128", sandbox.ErrInvalidSpec, k)
		}
	}
	st := handleState{Region: p.opts.Region, WorkDir: spec.WorkDir, Labels: labels, Env: spec.Env, Network: spec.Network}
	raw, err := json.Marshal(st)
	if err != nil {
		return sandbox.Handle{}, err
	}
	h := sandbox.Handle{Provider: Name, ID: id, Version: handleVersion, State: raw}

	vol := volSlug(id, 1)
	if err := p.createVolume(ctx, st.Region, vol, root); err != nil {
		if s := statusOf(err); s == http.StatusNotFound || s == http.StatusBadRequest {
			return sandbox.Handle{}, fmt.Errorf("%w: %w: %w", sandbox.ErrInvalidSpec, sandbox.ErrNoEffect, err)
		}
		return sandbox.Handle{}, p.undo(ctx, id, fmt.Errorf("deno: create %s: %w", id, err))
	}
	if _, err := p.boot(ctx, h, st, vol, true); err != nil {
		return sandbox.Handle{}, p.undo(ctx, id, fmt.Errorf("deno: create %s: %w", id, err))
	}
	return h, nil
}

// undo removes whatever a failed Create left. If that fails too, the leftovers carry the box's
// slugs and labels, so the reaper finds them.
func (p *Provider) undo(ctx context.Context, id string, cause error) error {
	if err := p.destroy(context.WithoutCancel(ctx), id); err != nil {
		p.log.Warn("cleanup after a failed create", zap.String("box", id), zap.Error(err))
		return errors.Join(cause, err)
	}
	if errors.Is(cause, ErrLimit) {
		// The plain text first: it is what the thread is told.
		return fmt.Errorf("%w (%w: %s)", ErrLimit, sandbox.ErrNoEffect, cause.Error())
	}
	return cause
}

// createVolume makes slug from snapshot from. A retry after a lost answer meets its own volume.
func (p *Provider) createVolume(ctx context.Context, region, slug, from string) error {
	body := map[string]any{"slug": slug, "region": region, "capacity": capacityValue(p.opts.VolumeCapacity), "from": from}
	_, err := p.do(ctx, "create volume "+slug, http.MethodPost, p.console("/api/v2/volumes", nil), body, nil, true, p.opts.RequestTimeout)
	if statusOf(err) == http.StatusConflict {
		var v volumeRec
		if _, gerr := p.do(ctx, "get volume "+slug, http.MethodGet, p.console("/api/v2/volumes/"+slug, nil), nil, &v, true, p.opts.RequestTimeout); gerr == nil && v.Base != nil && v.Base.Slug == from {
			return nil
		}
	}
	return err
}

// capacityValue sends a plain number as a number of bytes, anything else as the string.
func capacityValue(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// boot starts a sandbox on the volume, sets the env and makes the work directory.
// mkdir makes the work directory: needed on the first boot only, since everything a sandbox writes
// stays on its root volume.
func (p *Provider) boot(ctx context.Context, h sandbox.Handle, st handleState, vol string, mkdir bool) (*live, error) {
	deadline := p.clock.Now().Add(Lifetime)
	memory := 1280
	cfg := map[string]any{
		"stop_at_ms": deadline.UnixMilli(),
		"memory_mb":  memory,
		"labels":     st.Labels,
		"root":       map[string]string{"volume": vol},
		"volumes":    []any{},
	}
	if st.Network != sandbox.NetworkFull {
		cfg["allow_net"] = []string{} // omitted, Deno's network is open
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	p.auth(hdr)
	// The SDK sends btoa(JSON): standard base64 with padding (the same bytes for ASCII).
	hdr.Set("x-deno-sandbox-config", base64.StdEncoding.EncodeToString(raw))
	bctx, cancel := context.WithTimeout(ctx, p.opts.BootTimeout)
	defer cancel()
	u, err := p.host(st.Region, true, "api", "v3", "sandboxes", "create")
	if err != nil {
		return nil, err
	}
	var conn *rpcConn
	// A volume whose sandbox just died (killed, or past its deadline) is attached until it detaches.
	err = p.poll(bctx, func() (bool, error) {
		var err error
		conn, err = p.dialRPC(bctx, "create sandbox", u, hdr)
		return !(statusOf(err) == http.StatusConflict && codeOf(err) == "VOLUME_IN_USE"), err
	})
	if err != nil {
		return nil, err
	}
	lv := p.remember(h.ID, st.Region, conn, deadline)
	fail := func(err error) (*live, error) {
		p.forget(h.ID, lv)
		kerr := p.kill(context.WithoutCancel(ctx), st.Region, conn.sandboxID)
		return nil, errors.Join(err, kerr)
	}
	// The handle's env was filtered when the box was made, but a resume reads it back from storage,
	// perhaps written before a name joined the blocklist: blocked names are dropped again.
	blocked := sandbox.NewMatcher(sandbox.DefaultBlocked())
	keys := make([]string, 0, len(st.Env))
	for k, v := range st.Env {
		switch {
		case blocked.Match(k):
		case p.opts.Token != "" && strings.Contains(v, p.opts.Token):
			// Create refuses it; a stored handle is not refused (the box would never start again).
			p.log.Warn("dropped an environment variable carrying the Deno token", zap.String("box", h.ID), zap.String("name", k))
		default:
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := conn.call(bctx, "envSet", map[string]string{"key": k, "value": st.Env[k]}, nil, nil); err != nil {
			return fail(fmt.Errorf("set env %s: %w", k, err))
		}
	}
	if !mkdir {
		return lv, nil
	}
	// The sandbox runs as app, which may not own the work directory's parent: fall back to sudo, with
	// the ids taken outside it (seed 001).
	res, err := p.run(bctx, lv, `u=$(id -u):$(id -g); mkdir -p "$1" 2>/dev/null || { sudo -n mkdir -p "$1" && sudo -n chown "$u" "$1"; }`, st.WorkDir)
	if err == nil && res.code != 0 {
		err = fmt.Errorf("make the work directory %s: exit %d: %s", st.WorkDir, res.code, res.out)
	}
	if err != nil {
		return fail(err)
	}
	return lv, nil
}

// kill deletes a Deno sandbox over REST with its own timeout, as seed 001 does; a missing one is
// success.
func (p *Provider) kill(ctx context.Context, region, sandboxID string) error {
	u, err := p.host(region, false, "api", "v3", "sandbox", sandboxID)
	if err != nil {
		return fmt.Errorf("deno: kill %s: %w", sandboxID, err)
	}
	_, err = p.do(ctx, "kill "+sandboxID, http.MethodDelete, u, nil, nil, true, p.opts.KillTimeout)
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}

// Inspect implements sandbox.Provider: running while a Deno sandbox of the box runs, stopped while
// only its volume or snapshot is left (paused, or expired), not found when nothing is.
func (p *Provider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	if _, err := p.decode(h); err != nil {
		return sandbox.Info{}, err
	}
	b, err := p.find(ctx, h.ID)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("deno: inspect %s: %w", h.ID, err)
	}
	if !b.exists() {
		return sandbox.Info{}, fmt.Errorf("deno: %s: %w", h.ID, sandbox.ErrNotFound)
	}
	return p.info(h, b), nil
}

func (p *Provider) info(h sandbox.Handle, b boxState) sandbox.Info {
	info := sandbox.Info{Handle: h, State: sandbox.StateStopped, Network: sandbox.NetworkNone, CreatedAt: boxTime(h.ID)}
	if st, err := p.decode(h); err == nil && st.Network == sandbox.NetworkFull {
		info.Network = sandbox.NetworkFull
	}
	if b.running != nil {
		info.State = sandbox.StateRunning
	}
	if b.latest != nil {
		info.Labels = maps.Clone(b.latest.Labels)
		info.Image = b.latest.Labels[LabelImage]
		delete(info.Labels, LabelImage)
	}
	return info
}

// Start implements sandbox.Provider (resume): boot the box's volume if it still has one (it expired
// or its pause stopped short), else a new volume from its snapshot.
func (p *Provider) Start(ctx context.Context, h sandbox.Handle) error {
	st, err := p.decode(h)
	if err != nil {
		return err
	}
	b, err := p.find(ctx, h.ID)
	if err != nil {
		return fmt.Errorf("deno: start %s: %w", h.ID, err)
	}
	switch {
	case b.running != nil:
		return nil
	case !b.exists():
		return fmt.Errorf("deno: start %s: %w", h.ID, sandbox.ErrNotFound)
	}
	if st.Labels == nil && b.latest != nil {
		st.Labels = b.latest.Labels
	}
	vol, made := b.lastVolume(), false
	if vol == nil {
		snap := b.lastSnapshot()
		if snap == nil {
			return fmt.Errorf("deno: start %s: no bootable snapshot left: %w", h.ID, sandbox.ErrNotFound)
		}
		vol = &numbered{n: b.next(), slug: volSlug(h.ID, b.next())}
		if err := p.createVolume(ctx, st.Region, vol.slug, snap.slug); err != nil {
			return p.dropVolume(ctx, vol.slug, fmt.Errorf("deno: resume %s: %w", h.ID, err))
		}
		made = true
	}
	if _, err := p.boot(ctx, h, st, vol.slug, false); err != nil {
		err = fmt.Errorf("deno: resume %s: %w", h.ID, err)
		if made {
			// Back to the paused state (the snapshot alone), so the next resume starts clean.
			return p.dropVolume(ctx, vol.slug, err)
		}
		return err
	}
	// Snapshots older than the one this volume was made from are no longer needed.
	for _, s := range b.snapshots {
		if s.n < vol.n-1 {
			if err := p.deleteSnapshot(ctx, s.slug); err != nil {
				p.log.Warn("delete an old snapshot", zap.String("snapshot", s.slug), zap.Error(err))
			}
		}
	}
	return nil
}

// dropVolume deletes a volume made by a step that then failed, keeping cause as the error.
func (p *Provider) dropVolume(ctx context.Context, slug string, cause error) error {
	if err := p.deleteVolume(context.WithoutCancel(ctx), slug); err != nil {
		return errors.Join(cause, fmt.Errorf("and removing volume %s: %w", slug, err))
	}
	return cause
}

// Destroy implements sandbox.Provider: kill every running sandbox of the box, then delete its
// volumes (newest first) and then its snapshots. Idempotent.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	if _, err := p.decode(h); err != nil {
		return err
	}
	if err := p.destroy(ctx, h.ID); err != nil {
		return fmt.Errorf("deno: destroy %s: %w", h.ID, err)
	}
	return nil
}

func (p *Provider) destroy(ctx context.Context, id string) error {
	recs, err := p.listSandboxes(ctx, map[string]string{LabelBox: id})
	if err != nil {
		return err
	}
	for i := range recs {
		if recs[i].Status == "running" {
			if err := p.killBox(ctx, id, &recs[i]); err != nil {
				return err
			}
		}
	}
	p.mu.Lock()
	if lv := p.lives[id]; lv != nil {
		lv.conn.close()
		delete(p.lives, id)
	}
	p.mu.Unlock()
	boxes, err := p.storage(ctx, id+"-")
	if err != nil {
		return err
	}
	b := boxes[id]
	if b == nil {
		return nil
	}
	for i := len(b.volumes) - 1; i >= 0; i-- {
		if err := p.deleteVolume(ctx, b.volumes[i].slug); err != nil {
			return err
		}
	}
	for i := len(b.snapshots) - 1; i >= 0; i-- {
		if err := p.deleteSnapshot(ctx, b.snapshots[i].slug); err != nil {
			return err
		}
	}
	return nil
}

// List implements sandbox.Provider: the boxes whose sandboxes carry labels and that still have a
// volume or snapshot. With a deployment label it also returns the deployment's volumes and
// snapshots that no sandbox record explains (a create that failed and could not clean up), labelled
// with the deployment only, so the reaper treats them as unattributed.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	recs, err := p.listSandboxes(ctx, labels)
	if err != nil {
		return nil, fmt.Errorf("deno: list: %w", err)
	}
	dep := labels[sandbox.LabelDeployment]
	search := "tb"
	if dep != "" {
		search = boxPrefix(dep)
	}
	boxes, err := p.storage(ctx, search)
	if err != nil {
		return nil, fmt.Errorf("deno: list: %w", err)
	}
	seen := map[string]bool{}
	var out []sandbox.Info
	for _, r := range recs {
		id := r.Labels[LabelBox]
		if seen[id] || !validBoxID(id) {
			continue
		}
		seen[id] = true
		b := boxes[id]
		if b == nil {
			b = &boxState{id: id}
		}
		p.attach(b, recs)
		if !b.exists() {
			continue // destroyed: only its history is left
		}
		out = append(out, p.info(sandbox.Handle{Provider: Name, ID: id, Version: handleVersion}, *b))
	}
	if dep != "" && len(labels) == 1 {
		for id, b := range boxes {
			if !seen[id] {
				info := p.info(sandbox.Handle{Provider: Name, ID: id, Version: handleVersion}, *b)
				info.Labels = map[string]string{sandbox.LabelDeployment: dep}
				out = append(out, info)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Handle.ID < out[j].Handle.ID })
	return out, nil
}
