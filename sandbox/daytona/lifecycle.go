package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"time"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
)

// Create implements sandbox.Provider: POST /sandbox from the snapshot, then a wait for started.
//
// A 429 (and a request that never left) is retried: Daytona surely did nothing. A request that got no
// answer, or a 5xx, may have created the sandbox: it is looked up by its create label (a random
// token per Create) and adopted if found; a 5xx with nothing found is retried, a lost answer with
// nothing found is reported without ErrNoEffect, and its labels let the reaper find it later.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Handle, error) {
	if p.opts.Deployment != "" {
		if spec.Labels.Deployment == "" {
			spec.Labels.Deployment = p.opts.Deployment
		} else if spec.Labels.Deployment != p.opts.Deployment {
			return sandbox.Handle{}, fmt.Errorf("daytona create: %w: %w: deployment %q, this provider serves %q",
				sandbox.ErrNoEffect, sandbox.ErrInvalidSpec, spec.Labels.Deployment, p.opts.Deployment)
		}
	}
	spec, err := spec.Normalize()
	if err != nil {
		return sandbox.Handle{}, fmt.Errorf("daytona create: %w: %w", sandbox.ErrNoEffect, err)
	}
	if err := p.checkEnvValues(spec.Env); err != nil {
		return sandbox.Handle{}, fmt.Errorf("daytona create: %w: %w", sandbox.ErrNoEffect, err)
	}
	body := p.createBody(spec)
	token := (*body.Labels)[LabelCreate]

	b := newBackoff(200*time.Millisecond, 2, 5*time.Second)
	var sb api.Sandbox
	noEffect := false // the last failure surely did nothing
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if werr := b.wait(ctx, retryAfter(err)); werr != nil {
				if noEffect {
					return sandbox.Handle{}, fmt.Errorf("daytona create: %w: %w (last: %w)", sandbox.ErrNoEffect, werr, err)
				}
				return sandbox.Handle{}, fmt.Errorf("daytona create: %w (last: %w)", werr, err)
			}
		}
		err = p.once(ctx, "create", func(ctx context.Context) (*http.Response, error) {
			return p.api.CreateSandbox(ctx, nil, body)
		}, &sb)
		status := statusOf(err)
		if err == nil && sb.Id == "" {
			err = fmt.Errorf("%w: a sandbox without an id", errBadAnswer)
		}
		switch {
		case err == nil:
		case errors.Is(err, errBadAnswer):
			// Made, but which one is unknown: look it up by label rather than fail and leave it.
			found, lerr := p.findCreated(ctx, token)
			switch {
			case lerr != nil:
				return sandbox.Handle{}, fmt.Errorf("daytona create: %w; looking for what it made: %w", err, lerr)
			case found == "":
				return sandbox.Handle{}, fmt.Errorf("daytona create: %w, and nothing labelled %s=%s yet (the reaper will find it if it appears)",
					err, LabelCreate, token)
			}
			sb.Id, err = found, nil
		case status == http.StatusTooManyRequests || (isTransport(err) && unsent(err)):
			noEffect = true
			if attempt < 8 && ctx.Err() == nil {
				continue
			}
			return sandbox.Handle{}, fmt.Errorf("daytona create: %w: %w", sandbox.ErrNoEffect, err)
		case status == http.StatusBadRequest || status == http.StatusNotFound || status == http.StatusUnprocessableEntity:
			// An unknown snapshot, a bad field, a quota: Daytona refused before acting.
			return sandbox.Handle{}, fmt.Errorf("daytona create: %w: %w: %w", sandbox.ErrNoEffect, sandbox.ErrInvalidSpec, err)
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return sandbox.Handle{}, fmt.Errorf("daytona create: check sandbox.daytona.api_key: %w: %w", sandbox.ErrNoEffect, err)
		case status >= 500 || isTransport(err):
			found, lerr := p.findCreated(ctx, token)
			switch {
			case lerr != nil:
				return sandbox.Handle{}, fmt.Errorf("daytona create: %w; looking for what it made: %w", err, lerr)
			case found != "":
				sb.Id, err = found, nil
			case status >= 500 && attempt < 8 && ctx.Err() == nil:
				noEffect = true // the lookup shows it did nothing
				continue
			default:
				return sandbox.Handle{}, fmt.Errorf("daytona create: no answer, and nothing labelled %s=%s yet (the reaper will find it if it appears): %w",
					LabelCreate, token, err)
			}
		default:
			return sandbox.Handle{}, fmt.Errorf("daytona create: %w", err)
		}
		break
	}

	fail := func(err error) (sandbox.Handle, error) {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		if derr := p.destroy(cctx, sb.Id); derr != nil {
			p.log.Warn("destroy half-created sandbox failed; the reaper will find it by its labels")
		}
		return sandbox.Handle{}, fmt.Errorf("daytona create: %w", err)
	}
	sb, err = p.waitState(ctx, sb.Id, api.SandboxStateStarted)
	if err != nil {
		return fail(err)
	}
	tbURL, err := p.toolboxURL(ctx, sb.Id, sb.ToolboxProxyUrl)
	if err != nil {
		return fail(err)
	}
	// The work directory is made by the first exec or write (see ensureWorkDir).
	return newHandle(sb.Id, handleState{Toolbox: tbURL, WorkDir: spec.WorkDir}), nil
}

// createBody renders the spec as Daytona's CreateSandbox.
func (p *Provider) createBody(spec sandbox.Spec) api.CreateSandbox {
	labels := spec.Labels.Map()
	labels[LabelCreate] = randomID()
	snapshot := spec.Image
	if p.opts.Snapshot != "" {
		snapshot = p.opts.Snapshot
	}
	env := maps.Clone(spec.Env)
	body := api.CreateSandbox{
		Snapshot: &snapshot, Labels: &labels, Env: &env,
		// Resources are only honoured for image builds (a snapshot brings its own), but say what we want.
		Cpu:              ptr(int(math.Ceil(spec.Resources.CPUs))),
		Memory:           ptr(max(1, int(math.Ceil(float64(spec.Resources.MemoryMB)/1024)))),
		NetworkBlockAll:  ptr(spec.Network == sandbox.NetworkNone),
		AutoStopInterval: ptr(p.opts.AutoStopMinutes),
		Public:           ptr(false),
	}
	if spec.Resources.DiskMB > 0 {
		body.Disk = ptr(max(1, int(math.Ceil(float64(spec.Resources.DiskMB)/1024))))
	}
	if p.opts.Target != "" {
		body.Target = &p.opts.Target
	}
	body.AutoArchiveInterval = p.opts.AutoArchiveMinutes
	body.AutoDeleteInterval = p.opts.AutoDeleteMinutes
	return body
}

// findCreated looks a create's token up by label, under a context of its own: the caller's may be
// what ended the create.
func (p *Provider) findCreated(ctx context.Context, token string) (string, error) {
	lctx, cancel := cleanupCtx(ctx)
	defer cancel()
	items, err := p.list(lctx, map[string]string{LabelCreate: token})
	if err != nil || len(items) == 0 {
		return "", err
	}
	return items[0].Id, nil
}

// Inspect implements sandbox.Provider. A sandbox being destroyed is reported as gone.
func (p *Provider) Inspect(ctx context.Context, h sandbox.Handle) (sandbox.Info, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return sandbox.Info{}, err
	}
	sb, err := p.get(ctx, h.ID)
	if err != nil {
		return sandbox.Info{}, err
	}
	if gone(sb.State) {
		return sandbox.Info{}, fmt.Errorf("daytona inspect %s: %s: %w", h.ID, *sb.State, sandbox.ErrNotFound)
	}
	st.Toolbox = sb.ToolboxProxyUrl
	info := info(sb.Id, sb.State, sb.Labels, sb.Snapshot, sb.CreatedAt, sb.NetworkBlockAll, st)
	info.User = sb.User
	info.Resources = sandbox.Resources{CPUs: float64(sb.Cpu), MemoryMB: int(sb.Memory * 1024), DiskMB: int(sb.Disk * 1024)}
	return info, nil
}

func (p *Provider) get(ctx context.Context, id string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := p.call(ctx, "get "+id, func(ctx context.Context) (*http.Response, error) {
		return p.api.GetSandbox(ctx, id, nil)
	}, &sb)
	return sb, err
}

// Start implements sandbox.Provider: POST start (a no-op when started), then a wait for started.
func (p *Provider) Start(ctx context.Context, h sandbox.Handle) error {
	if _, err := decodeHandle(h); err != nil {
		return err
	}
	return p.transition(ctx, h.ID, "start", api.SandboxStateStarted, func(ctx context.Context) (*http.Response, error) {
		return p.api.StartSandbox(ctx, h.ID, nil)
	})
}

// Stop implements sandbox.Provider: POST stop, then a wait for stopped. Stopping a stopped sandbox
// is a no-op (Daytona answers 400; the state says it is stopped already).
func (p *Provider) Stop(ctx context.Context, h sandbox.Handle) error {
	if _, err := decodeHandle(h); err != nil {
		return err
	}
	return p.transition(ctx, h.ID, "stop", api.SandboxStateStopped, func(ctx context.Context) (*http.Response, error) {
		return p.api.StopSandbox(ctx, h.ID, nil)
	})
}

// transition asks for a state change and waits for want. A 409 (a change in flight) waits for the
// sandbox to settle and asks again; a 400 (wrong state) is fine if the sandbox is in want already.
func (p *Provider) transition(ctx context.Context, id, op string, want api.SandboxState, send func(ctx context.Context) (*http.Response, error)) error {
	deadline, cancel := context.WithTimeout(ctx, p.opts.StateTimeout)
	defer cancel()
	for {
		err := p.call(deadline, op+" "+id, send, nil)
		switch statusOf(err) {
		case 0:
			if err != nil {
				return err
			}
			_, err = p.waitState(deadline, id, want)
			return err
		case http.StatusConflict, http.StatusBadRequest:
			sb, werr := p.waitSettled(deadline, id)
			if werr != nil {
				return werr
			}
			if *sb.State == want {
				return nil
			}
			if statusOf(err) == http.StatusBadRequest && settledState(sb.State) {
				return fmt.Errorf("daytona %s %s: sandbox is %s: %w", op, id, *sb.State, err)
			}
		default:
			return err
		}
	}
}

// Destroy implements sandbox.Provider: DELETE, then a wait until the sandbox is gone. A missing
// sandbox is success.
func (p *Provider) Destroy(ctx context.Context, h sandbox.Handle) error {
	if _, err := decodeHandle(h); err != nil {
		return err
	}
	return p.destroy(ctx, h.ID)
}

func (p *Provider) destroy(ctx context.Context, id string) error {
	p.forgetPreviews(id)
	deadline, cancel := context.WithTimeout(ctx, p.opts.StateTimeout)
	defer cancel()
	for {
		err := p.call(deadline, "delete "+id, func(ctx context.Context) (*http.Response, error) {
			return p.api.DeleteSandbox(ctx, id, nil)
		}, nil)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			return nil
		case statusOf(err) == http.StatusConflict:
			if _, err := p.waitSettled(deadline, id); err != nil {
				if errors.Is(err, sandbox.ErrNotFound) {
					return nil
				}
				return err
			}
			continue
		case err != nil:
			return err
		}
		_, err = p.waitState(deadline, id, api.SandboxStateDestroyed)
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil
		}
		return err
	}
}

// List implements sandbox.Provider: GET /sandbox filtered by labels, page by page. Sandboxes being
// destroyed are left out.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	want := maps.Clone(labels)
	if want == nil {
		want = map[string]string{}
	}
	if p.opts.Deployment != "" {
		want[sandbox.LabelDeployment] = p.opts.Deployment
	}
	items, err := p.list(ctx, want)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Info, 0, len(items))
	for _, it := range items {
		if gone(it.State) {
			continue
		}
		out = append(out, info(it.Id, it.State, it.Labels, it.Snapshot, it.CreatedAt, it.NetworkBlockAll,
			handleState{Toolbox: it.ToolboxProxyUrl}))
	}
	return out, nil
}

// maxListPages bounds a listing: 100 pages of 200 is more sandboxes than a deployment runs, and a
// cursor that never ends (or repeats) must not loop forever nor grow the result without bound.
const maxListPages = 100

// maxListItems bounds the items a listing keeps, whatever the pages hold (a page may be 8 MiB).
const maxListItems = maxListPages * 200

func (p *Provider) list(ctx context.Context, labels map[string]string) ([]api.SandboxListItem, error) {
	raw, _ := json.Marshal(labels) // map of strings: cannot fail
	params := &api.ListSandboxesParams{Labels: ptr(string(raw)), Limit: ptr(float32(200))}
	var all []api.SandboxListItem
	for pages := 0; ; pages++ {
		if pages == maxListPages {
			return nil, fmt.Errorf("daytona list: more than %d pages (the cursor never ends)", maxListPages)
		}
		var page api.ListSandboxesResponse
		err := p.call(ctx, "list", func(ctx context.Context) (*http.Response, error) {
			return p.api.ListSandboxes(ctx, params)
		}, &page)
		if err != nil {
			return nil, err
		}
		// The filter is checked again here: the reaper destroys what this returns and a lost
		// create adopts it, so an API that answered with more must not hand us others' sandboxes.
		for _, it := range page.Items {
			if hasLabels(it.Labels, labels) {
				all = append(all, it)
			}
		}
		if len(all) > maxListItems {
			return nil, fmt.Errorf("daytona list: more than %d sandboxes", maxListItems)
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return all, nil
		}
		if params.Cursor != nil && *params.Cursor == *page.NextCursor {
			return nil, fmt.Errorf("daytona list: the next page's cursor is this page's (after %d pages)", pages+1)
		}
		params.Cursor = page.NextCursor
	}
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func info(id string, state *api.SandboxState, labels map[string]string, snapshot, created *string, blockAll bool, st handleState) sandbox.Info {
	i := sandbox.Info{Handle: newHandle(id, st), State: mapState(state), Labels: labels, Network: sandbox.NetworkFull}
	if snapshot != nil {
		i.Image = *snapshot
	}
	if created != nil {
		if t, err := time.Parse(time.RFC3339Nano, *created); err == nil {
			i.CreatedAt = t.UTC()
		}
	}
	if blockAll {
		i.Network = sandbox.NetworkNone
	}
	return i
}

func mapState(s *api.SandboxState) sandbox.State {
	if s == nil {
		return sandbox.StateStarting
	}
	switch *s {
	case api.SandboxStateStarted:
		return sandbox.StateRunning
	case api.SandboxStateStopped, api.SandboxStateStopping, api.SandboxStatePaused, api.SandboxStatePausing:
		return sandbox.StateStopped
	case api.SandboxStateArchived, api.SandboxStateArchiving:
		return sandbox.StateArchived
	case api.SandboxStateError, api.SandboxStateBuildFailed:
		return sandbox.StateFailed
	default: // creating, starting, restoring, resuming, building, pulling, …: wait, don't recreate
		return sandbox.StateStarting
	}
}

func gone(s *api.SandboxState) bool {
	return s != nil && (*s == api.SandboxStateDestroyed || *s == api.SandboxStateDestroying)
}

// settledState: no transition in flight.
func settledState(s *api.SandboxState) bool {
	if s == nil {
		return false
	}
	switch *s {
	case api.SandboxStateStarted, api.SandboxStateStopped, api.SandboxStateArchived, api.SandboxStatePaused,
		api.SandboxStateError, api.SandboxStateBuildFailed, api.SandboxStateDestroyed:
		return true
	}
	return false
}

// waitState polls GET /sandbox/{id} until the sandbox is in want: first at once, then with a
// backoff from 10 ms growing by 1.05 up to 1 s (fine-grained early, so that a transition of
// a second is seen within a few percent of its end; after about 20 s it polls once a second), under StateTimeout. It fails fast on error states, with Daytona's reason. While waiting
// for destroyed, a 404 is what it waits for (returned as ErrNotFound).
func (p *Provider) waitState(ctx context.Context, id string, want api.SandboxState) (api.Sandbox, error) {
	return p.poll(ctx, id, func(sb api.Sandbox) bool { return sb.State != nil && *sb.State == want }, string(want))
}

// waitSettled waits until no transition is in flight.
func (p *Provider) waitSettled(ctx context.Context, id string) (api.Sandbox, error) {
	return p.poll(ctx, id, func(sb api.Sandbox) bool { return settledState(sb.State) }, "a settled state")
}

func (p *Provider) poll(ctx context.Context, id string, done func(api.Sandbox) bool, what string) (api.Sandbox, error) {
	deadline, cancel := context.WithTimeout(ctx, p.opts.StateTimeout)
	defer cancel()
	b := newBackoff(10*time.Millisecond, 1.05, time.Second)
	for {
		sb, err := p.get(deadline, id)
		if err != nil {
			return sb, err
		}
		if done(sb) {
			return sb, nil
		}
		if sb.State != nil && (*sb.State == api.SandboxStateError || *sb.State == api.SandboxStateBuildFailed) {
			reason := "no reason given"
			if sb.ErrorReason != nil {
				reason = clip(*sb.ErrorReason)
			}
			return sb, fmt.Errorf("daytona sandbox %s is %s: %s", id, *sb.State, reason)
		}
		if err := b.wait(deadline, 0); err != nil {
			state := "unknown"
			if sb.State != nil {
				state = string(*sb.State)
			}
			return sb, fmt.Errorf("daytona sandbox %s: waiting for %s (still %s): %w", id, what, state, err)
		}
	}
}
