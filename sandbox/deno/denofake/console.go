package denofake

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// volume is a Deno volume: its content is a tar of /workspace (nil: empty).
type volume struct {
	id, slug, region string
	capacity         int64
	base             *snapshot // the snapshot it was made from, or nil
	bootable         bool
	data             []byte
	attached         string // the sandbox that has it as root; "" when detached
	jobs             int    // snapshot jobs reading it
}

// snapshot is an immutable copy of a detached volume's content.
type snapshot struct {
	id, slug, region string
	volID, volSlug   string
	data             []byte
	bootable         bool
	dead             bool // its job was killed: never bootable
}

func (f *Fake) routeConsole(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v2/sandboxes", f.listSandboxes)
	mux.HandleFunc("POST /api/v2/volumes", f.createVolume)
	mux.HandleFunc("GET /api/v2/volumes", f.listVolumes)
	mux.HandleFunc("GET /api/v2/volumes/{ref}", f.getVolume)
	mux.HandleFunc("DELETE /api/v2/volumes/{ref}", f.deleteVolume)
	mux.HandleFunc("POST /api/v2/volumes/{ref}/snapshot", f.snapshotVolume)
	mux.HandleFunc("GET /api/v2/snapshots", f.listSnapshots)
	mux.HandleFunc("GET /api/v2/snapshots/{ref}", f.getSnapshot)
	mux.HandleFunc("DELETE /api/v2/snapshots/{ref}", f.deleteSnapshot)
}

var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}[a-z0-9]$`)

// ValidSlug applies Deno's slug rules (cloud-apis.md §2.6): 2–32 characters of a-z, 0-9 and '-',
// no leading or trailing '-', and no "--" at positions 3–4.
func ValidSlug(s string) bool {
	return slugRE.MatchString(s) && !(len(s) >= 4 && s[2:4] == "--")
}

func validRegion(r string) bool { return r == "ord" || r == "ams" }

// parseCapacity accepts a number of bytes or a string with a unit (GB, MB, kB, GiB, MiB, KiB).
func parseCapacity(v any) (int64, error) {
	switch c := v.(type) {
	case float64:
		return int64(c), nil
	case string:
		units := []struct {
			suffix string
			mult   float64
		}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}}
		for _, u := range units {
			if n, ok := strings.CutSuffix(c, u.suffix); ok {
				x, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
				if err != nil {
					return 0, fmt.Errorf("capacity %q: %w", c, err)
				}
				return int64(x * u.mult), nil
			}
		}
		return 0, fmt.Errorf("capacity %q: unknown unit", c)
	}
	return 0, fmt.Errorf("capacity: want a number or a string, got %T", v)
}

// slugTakenLocked reports whether slug names any volume or snapshot (one namespace).
func (f *Fake) slugTakenLocked(slug string) bool {
	for _, v := range f.volumes {
		if v.slug == slug {
			return true
		}
	}
	for _, s := range f.snapshots {
		if s.slug == slug {
			return true
		}
	}
	return false
}

func (f *Fake) volumeLocked(ref string) *volume {
	if v, ok := f.volumes[ref]; ok {
		return v
	}
	for _, v := range f.volumes {
		if v.slug == ref {
			return v
		}
	}
	return nil
}

func (f *Fake) snapshotLocked(ref string) *snapshot {
	if s, ok := f.snapshots[ref]; ok {
		return s
	}
	for _, s := range f.snapshots {
		if s.slug == ref {
			return s
		}
	}
	return nil
}

func (f *Fake) createVolume(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpCreateVolume)
	if !ok {
		return
	}
	defer done()
	var req struct {
		Slug     string `json:"slug"`
		Region   string `json:"region"`
		Capacity any    `json:"capacity"`
		From     string `json:"from,omitempty"`
	}
	if err := decodeStrict(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", err.Error())
		return
	}
	if !ValidSlug(req.Slug) {
		apiError(w, http.StatusBadRequest, "INVALID_SLUG", fmt.Sprintf("slug %q: 2-32 characters of a-z, 0-9 and '-', not starting or ending with '-'", req.Slug))
		return
	}
	if !validRegion(req.Region) {
		apiError(w, http.StatusBadRequest, "INVALID_REGION", fmt.Sprintf("region %q: must be ord or ams", req.Region))
		return
	}
	capacity, err := parseCapacity(req.Capacity)
	if err != nil || capacity < 300e6 || capacity > 20e9 {
		apiError(w, http.StatusBadRequest, "INVALID_CAPACITY", fmt.Sprintf("capacity %v: must be between 300MB and 20GB (%v)", req.Capacity, err))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.slugTakenLocked(req.Slug) {
		apiError(w, http.StatusConflict, "SLUG_ALREADY_EXISTS", fmt.Sprintf("a volume or snapshot named %q already exists", req.Slug))
		return
	}
	v := &volume{id: newResID("vol"), slug: req.Slug, region: req.Region, capacity: capacity}
	switch {
	case req.From == "":
	case strings.HasPrefix(req.From, "builtin:"):
		if req.From != "builtin:debian-13" {
			apiError(w, http.StatusBadRequest, "INVALID_FROM", fmt.Sprintf("unknown builtin image %q", req.From))
			return
		}
		v.bootable = true
	default:
		s := f.snapshotLocked(req.From)
		if s == nil || s.region != req.Region {
			apiError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", fmt.Sprintf("snapshot %q not found in region %s", req.From, req.Region))
			return
		}
		if !s.bootable {
			apiError(w, http.StatusBadRequest, "SNAPSHOT_NOT_READY", fmt.Sprintf("snapshot %q is not ready", req.From))
			return
		}
		v.base, v.bootable, v.data = s, true, s.data // content is immutable: sharing it is copy-on-write
	}
	f.volumes[v.id] = v
	writeJSON(w, http.StatusOK, volumeJSON(v))
}

func volumeJSON(v *volume) map[string]any {
	var base any
	if v.base != nil {
		base = map[string]string{"id": v.base.id, "slug": v.base.slug}
	}
	return map[string]any{"id": v.id, "slug": v.slug, "region": v.region, "capacity": v.capacity,
		"estimated_allocated_size": len(v.data), "estimated_flattened_size": len(v.data),
		"is_bootable": v.bootable, "base_snapshot": base}
}

func snapshotJSON(s *snapshot) map[string]any {
	return map[string]any{"id": s.id, "slug": s.slug, "region": s.region, "allocated_size": len(s.data),
		"flattened_size": len(s.data), "is_bootable": s.bootable, "volume": map[string]string{"id": s.volID, "slug": s.volSlug}}
}

// page answers a list with limit/cursor pagination and the Link header of the next page.
func page[T any](f *Fake, w http.ResponseWriter, r *http.Request, items []T, slug func(T) string, render func(T) map[string]any) {
	q := r.URL.Query()
	limit := f.opts.PageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			apiError(w, http.StatusBadRequest, "INVALID_QUERY", fmt.Sprintf("limit %q: 1-100", s))
			return
		}
		limit = n
	}
	if search := q.Get("search"); search != "" {
		kept := items[:0]
		for _, it := range items {
			if strings.Contains(slug(it), search) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	sort.Slice(items, func(i, j int) bool { return slug(items[i]) < slug(items[j]) })
	start := 0
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 || n > len(items) {
			apiError(w, http.StatusBadRequest, "INVALID_CURSOR", fmt.Sprintf("cursor %q", c))
			return
		}
		start = n
	}
	end := min(start+limit, len(items))
	if end < len(items) {
		next := *r.URL
		nq := next.Query()
		nq.Set("cursor", strconv.Itoa(end))
		next.RawQuery = nq.Encode()
		w.Header().Set("Link", fmt.Sprintf("<%s%s>; rel=\"next\"", f.srv.URL, next.RequestURI()))
	}
	out := make([]map[string]any, 0, end-start)
	for _, it := range items[start:end] {
		out = append(out, render(it))
	}
	writeJSON(w, http.StatusOK, out)
}

func (f *Fake) listVolumes(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpListVolumes)
	if !ok {
		return
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	items := make([]*volume, 0, len(f.volumes))
	for _, v := range f.volumes {
		items = append(items, v)
	}
	page(f, w, r, items, func(v *volume) string { return v.slug }, volumeJSON)
}

func (f *Fake) listSnapshots(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpListSnapshots)
	if !ok {
		return
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	items := make([]*snapshot, 0, len(f.snapshots))
	for _, s := range f.snapshots {
		items = append(items, s)
	}
	page(f, w, r, items, func(s *snapshot) string { return s.slug }, snapshotJSON)
}

func (f *Fake) getVolume(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpGetVolume)
	if !ok {
		return
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.volumeLocked(r.PathValue("ref"))
	if v == nil {
		apiError(w, http.StatusNotFound, "VOLUME_NOT_FOUND", "volume not found")
		return
	}
	writeJSON(w, http.StatusOK, volumeJSON(v))
}

func (f *Fake) getSnapshot(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpGetSnapshot)
	if !ok {
		return
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snapshotLocked(r.PathValue("ref"))
	if s == nil {
		apiError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", "snapshot not found")
		return
	}
	writeJSON(w, http.StatusOK, snapshotJSON(s))
}

func (f *Fake) deleteVolume(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpDeleteVolume)
	if !ok {
		return
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.volumeLocked(r.PathValue("ref"))
	switch {
	case v == nil:
		apiError(w, http.StatusNotFound, "VOLUME_NOT_FOUND", "volume not found")
		return
	case v.attached != "":
		apiError(w, http.StatusConflict, "VOLUME_IN_USE", fmt.Sprintf("volume %s is attached to sandbox %s", v.slug, v.attached))
		return
	case v.jobs > 0:
		// Seed 001: deleting the source volume kills the snapshot job, observed as a 500.
		for _, s := range f.snapshots {
			if s.volID == v.id && !s.bootable {
				s.dead = true
			}
		}
		delete(f.volumes, v.id)
		apiError(w, http.StatusInternalServerError, "JOB_IS_DEAD", "the snapshot job of this volume died")
		return
	}
	delete(f.volumes, v.id)
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpDeleteSnapshot)
	if !ok {
		return
	}
	defer done()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snapshotLocked(r.PathValue("ref"))
	if s == nil {
		apiError(w, http.StatusNotFound, "SNAPSHOT_NOT_FOUND", "snapshot not found")
		return
	}
	for _, v := range f.volumes {
		if v.base == s {
			apiError(w, http.StatusConflict, "SNAPSHOT_IN_USE", fmt.Sprintf("snapshot %s is the base of volume %s", s.slug, v.slug))
			return
		}
	}
	delete(f.snapshots, s.id)
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) snapshotVolume(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpSnapshotVolume)
	if !ok {
		return
	}
	defer done()
	var req struct {
		Slug string `json:"slug"`
	}
	if err := decodeStrict(r, &req); err != nil {
		apiError(w, http.StatusBadRequest, "INVALID_BODY", err.Error())
		return
	}
	if !ValidSlug(req.Slug) {
		apiError(w, http.StatusBadRequest, "INVALID_SLUG", fmt.Sprintf("slug %q is invalid", req.Slug))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.volumeLocked(r.PathValue("ref"))
	switch {
	case v == nil:
		apiError(w, http.StatusNotFound, "VOLUME_NOT_FOUND", "volume not found")
		return
	case v.attached != "":
		// Seed 001: snapshotting right after a kill, before the volume detached, answers 500.
		apiError(w, http.StatusInternalServerError, "INTERNAL_SERVER_ERROR", fmt.Sprintf("volume %s is attached to a sandbox", v.slug))
		return
	case f.slugTakenLocked(req.Slug):
		apiError(w, http.StatusConflict, "SLUG_ALREADY_EXISTS", fmt.Sprintf("a volume or snapshot named %q already exists", req.Slug))
		return
	}
	s := &snapshot{id: newResID("snp"), slug: req.Slug, region: v.region, volID: v.id, volSlug: v.slug}
	f.snapshots[s.id] = s
	v.jobs++
	hold, data := f.holdJobs, v.data
	// The job runs asynchronously, as on Deno: the snapshot is bootable once it finishes.
	f.goBackground(func(ctx context.Context) {
		if hold != nil {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		v.jobs--
		if !s.dead {
			s.data, s.bootable = data, true
		}
	})
	writeJSON(w, http.StatusOK, snapshotJSON(s))
}

func (f *Fake) listSandboxes(w http.ResponseWriter, r *http.Request) {
	done, ok := f.op(w, OpListSandboxes)
	if !ok {
		return
	}
	defer done()
	want := map[string]string{}
	for k, vs := range r.URL.Query() {
		key, ok := strings.CutPrefix(k, "labels[")
		if !ok || !strings.HasSuffix(key, "]") || len(vs) != 1 {
			apiError(w, http.StatusBadRequest, "INVALID_QUERY", fmt.Sprintf("unknown query parameter %q", k))
			return
		}
		want[strings.TrimSuffix(key, "]")] = vs[0]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []map[string]any{}
	ids := make([]string, 0, len(f.boxes))
	for id := range f.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
next:
	for _, id := range ids {
		b := f.boxes[id]
		for k, v := range want {
			if b.labels[k] != v {
				continue next
			}
		}
		var stopped any
		if !b.stoppedAt.IsZero() {
			stopped = b.stoppedAt.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, map[string]any{"id": b.id, "createdAt": b.createdAt.UTC().Format(time.RFC3339Nano),
			"stoppedAt": stopped, "region": b.region, "status": b.status, "labels": b.labels})
	}
	writeJSON(w, http.StatusOK, out)
}

// Counts reports how many volumes and snapshots have a slug starting with prefix.
func (f *Fake) Counts(prefix string) (volumes, snapshots int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.volumes {
		if strings.HasPrefix(v.slug, prefix) {
			volumes++
		}
	}
	for _, s := range f.snapshots {
		if strings.HasPrefix(s.slug, prefix) {
			snapshots++
		}
	}
	return volumes, snapshots
}
