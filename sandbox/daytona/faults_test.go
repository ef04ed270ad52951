package daytona_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// The fault tests run the fake on the in-memory backend: what they check is the provider's handling
// of Daytona's answers, not what runs inside.
const memImage = "snapshot-mem"

func newMemFake(t *testing.T) *daytonafake.Fake {
	t.Helper()
	f := daytonafake.New(t, daytonafake.Options{Backend: sandboxfake.New(), Snapshots: []string{memImage}})
	t.Cleanup(func() { require.Empty(t, f.Violations(), "requests that break Daytona's specs") })
	return f
}

func memSpec(t *testing.T) sandbox.Spec {
	return sandbox.Spec{Image: memImage, Labels: sandbox.Labels{Deployment: "faults", Thread: t.Name(), Generation: 1}}
}

// TestCreateRetries: answers after which Daytona surely did nothing (429), or after which a lookup
// by the create label shows it did nothing (5xx), are retried; every case ends with one sandbox.
func TestCreateRetries(t *testing.T) {
	f := newMemFake(t) // shared: loading the specs is the slow part
	p := newProvider(t, f, nil)
	for _, tc := range []struct {
		name      string
		faults    []daytonafake.Fault
		wantCalls int
	}{
		{"no fault", nil, 1},
		{"429 twice", []daytonafake.Fault{{Op: "createSandbox", Status: http.StatusTooManyRequests, Times: 2}}, 3},
		{"503 then 500", []daytonafake.Fault{
			{Op: "createSandbox", Status: http.StatusServiceUnavailable},
			{Op: "createSandbox", Status: http.StatusInternalServerError},
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ft := range tc.faults {
				f.Inject(ft)
			}
			calls := f.Calls("createSandbox")
			h, err := p.Create(t.Context(), memSpec(t))
			require.NoError(t, err)
			require.Equal(t, tc.wantCalls, f.Calls("createSandbox")-calls)
			require.Equal(t, 1, f.Count(), "exactly one sandbox made")
			info, err := p.Inspect(t.Context(), h)
			require.NoError(t, err)
			require.Equal(t, sandbox.StateRunning, info.State)
			require.NoError(t, p.Destroy(t.Context(), h))
			require.Zero(t, f.Count())
		})
	}
}

// TestCreateLostAnswer: the create is carried out but its answer never comes. The provider does not
// send it again: it finds the sandbox by its create label and adopts it.
func TestCreateLostAnswer(t *testing.T) {
	f := newMemFake(t)
	p := newProvider(t, f, func(o *daytona.Options) { o.RequestTimeout = 500 * time.Millisecond })
	f.Inject(daytonafake.Fault{Op: "createSandbox", Hang: true})
	spec := memSpec(t)
	h, err := p.Create(t.Context(), spec)
	require.NoError(t, err)
	require.Equal(t, 1, f.Calls("createSandbox"), "not retried blindly")
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: spec.Labels.Deployment})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, h.ID, list[0].Handle.ID, "the handle is the sandbox the lost create made")
	require.NoError(t, p.Destroy(t.Context(), h))
}

// TestCreateLostAnswerFoundLater: the create times out before Daytona has acted on it, so a lookup
// by its label finds nothing; then Daytona makes the sandbox after all. The provider neither sends
// the create again nor claims it did nothing (no ErrNoEffect: the caller must not retry blindly),
// and the sandbox it made carries the deployment and thread labels the reaper lists by.
func TestCreateLostAnswerFoundLater(t *testing.T) {
	f := newMemFake(t)
	p := newProvider(t, f, func(o *daytona.Options) { o.RequestTimeout = 300 * time.Millisecond })
	release := make(chan struct{})
	f.Inject(daytonafake.Fault{Op: "createSandbox", Hang: true, Release: release})
	carried := f.Await("createSandbox")
	spec := memSpec(t)
	_, err := p.Create(t.Context(), spec)
	require.Error(t, err)
	require.NotErrorIs(t, err, sandbox.ErrNoEffect, "the create may have had its effect")
	require.ErrorContains(t, err, "reaper")
	require.Equal(t, 1, f.Calls("createSandbox"), "not retried blindly")
	require.Zero(t, f.Count(), "nothing made yet")

	close(release)
	<-carried
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: spec.Labels.Deployment})
	require.NoError(t, err)
	require.Len(t, list, 1, "the late sandbox is found by the deployment label")
	require.Equal(t, spec.Labels.Thread, list[0].Labels[sandbox.LabelThread])
	require.Equal(t, 1, f.Calls("createSandbox"))
	require.NoError(t, p.Destroy(t.Context(), list[0].Handle))
}

// TestCreateRefused: refusals before any effect wrap ErrNoEffect (and ErrInvalidSpec for a spec
// Daytona cannot use), so the caller may retry or report, and leave nothing behind.
func TestCreateRefused(t *testing.T) {
	f := newMemFake(t)
	for _, tc := range []struct {
		name    string
		spec    func(*sandbox.Spec)
		fault   *daytonafake.Fault
		key     string
		invalid bool
	}{
		{name: "unknown snapshot", spec: func(s *sandbox.Spec) { s.Image = "no-such-snapshot" }, invalid: true},
		{name: "bad key", key: "wrong"},
		{name: "429 until ctx ends", fault: &daytonafake.Fault{Op: "createSandbox", Status: http.StatusTooManyRequests, Times: 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t, f, func(o *daytona.Options) {
				if tc.key != "" {
					o.APIKey = tc.key
				}
			})
			if tc.fault != nil {
				f.Inject(*tc.fault)
			}
			spec := memSpec(t)
			if tc.spec != nil {
				tc.spec(&spec)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err := p.Create(ctx, spec)
			require.ErrorIs(t, err, sandbox.ErrNoEffect)
			require.Equal(t, tc.invalid, errors.Is(err, sandbox.ErrInvalidSpec), "ErrInvalidSpec: %v", err)
			require.Zero(t, f.Count())
		})
	}
}

// TestLifecycleRetries: 429 and 5xx on lifecycle calls and state polls are retried.
func TestLifecycleRetries(t *testing.T) {
	f := newMemFake(t)
	p := newProvider(t, f, nil)
	h, err := p.Create(t.Context(), memSpec(t))
	require.NoError(t, err)
	for _, ft := range []daytonafake.Fault{
		{Op: "stopSandbox", Status: http.StatusTooManyRequests},
		{Op: "getSandbox", Status: http.StatusBadGateway},
		{Op: "startSandbox", Status: http.StatusInternalServerError},
		{Op: "deleteSandbox", Status: http.StatusServiceUnavailable},
	} {
		f.Inject(ft)
	}
	require.NoError(t, p.Stop(t.Context(), h))
	info, err := p.Inspect(t.Context(), h)
	require.NoError(t, err)
	require.Equal(t, sandbox.StateStopped, info.State)
	require.NoError(t, p.Start(t.Context(), h))
	require.NoError(t, p.Destroy(t.Context(), h))
	_, err = p.Inspect(t.Context(), h)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
	require.Equal(t, 2, f.Calls("deleteSandbox"), "the 503 was retried")
}

// TestTransitionInFlight: a destroy asked while a stop is still in flight gets 409 from Daytona; the
// provider waits for the stop to settle and asks again, and both calls succeed.
func TestTransitionInFlight(t *testing.T) {
	f := newMemFake(t)
	p := newProvider(t, f, nil)
	h, err := p.Create(t.Context(), memSpec(t))
	require.NoError(t, err)

	held, release := f.HoldTransitions()
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(t.Context(), h) }()
	require.Equal(t, h.ID, <-held, "the stop is in flight")
	require.Equal(t, "stopping", f.State(h.ID))

	asked := f.Await("deleteSandbox")
	destroyed := make(chan error, 1)
	go func() { destroyed <- p.Destroy(t.Context(), h) }()
	<-asked // the destroy has met the stop in flight (409)
	release()
	require.NoError(t, <-destroyed)
	if err := <-stopped; err != nil {
		// The stop settled, then the destroy went through before the stop's wait saw "stopped".
		require.ErrorIs(t, err, sandbox.ErrNotFound)
	}
	require.GreaterOrEqual(t, f.Calls("deleteSandbox"), 2, "the 409 was answered by asking again")
	_, err = p.Inspect(t.Context(), h)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
	require.NoError(t, p.Destroy(t.Context(), h), "destroying a destroyed sandbox succeeds")
}

// TestToolboxURLFallback: without toolboxProxyUrl in the sandbox object, the provider asks
// GET /sandbox/{id}/toolbox-proxy-url, and a bare handle (an ID only) is enough to exec.
func TestToolboxURLFallback(t *testing.T) {
	f := daytonafake.New(t, daytonafake.Options{Backend: sandboxfake.New(), Snapshots: []string{memImage}, OmitToolboxURL: true})
	t.Cleanup(func() { require.Empty(t, f.Violations()) })
	p := newProvider(t, f, nil)
	h, err := p.Create(t.Context(), memSpec(t))
	require.NoError(t, err)
	res, err := p.Exec(t.Context(), sandbox.Handle{Provider: daytona.Name, ID: h.ID}, sandbox.ExecRequest{Cmd: []string{"true"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, 2, f.Calls("getToolboxProxyUrl"), "once for Create's handle, once for the bare one")
	require.NoError(t, p.Destroy(t.Context(), h))
}

// TestToolboxRetries: 429 and 5xx from the toolbox on calls that may be repeated (a session by its
// ID, a command's status, a session's removal) are retried; the command itself runs once.
func TestToolboxRetries(t *testing.T) {
	f := newMemFake(t)
	p := newProvider(t, f, nil)
	h, err := p.Create(t.Context(), memSpec(t))
	require.NoError(t, err)
	for _, ft := range []daytonafake.Fault{
		{Op: "CreateSession", Status: http.StatusBadGateway},
		{Op: "GetSessionCommand", Status: http.StatusTooManyRequests},
		{Op: "DeleteSession", Status: http.StatusServiceUnavailable},
	} {
		f.Inject(ft)
	}
	res, err := p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"true"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, 1, f.Calls("SessionExecuteCommand"), "the command is never sent twice")
	require.Equal(t, 2, f.Calls("CreateSession"))
	require.Equal(t, 2, f.Calls("DeleteSession"))
	require.NoError(t, p.Destroy(t.Context(), h))
}

// mangleCreate answers a create that Daytona carried out with a body that is not the sandbox: an
// answer cut short, a proxy's page, a sandbox without an id.
type mangleCreate struct{ body string }

func (m mangleCreate) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/api/sandbox") || resp.StatusCode/100 != 2 {
		return resp, err
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(m.body))
	resp.ContentLength = int64(len(m.body))
	return resp, nil
}

// TestCreateGarbledAnswer: a 2xx whose body is not a sandbox means the sandbox was made but its id
// is unknown: the provider finds it by its create label and adopts it, instead of failing and
// leaving it running (and billed) for the reaper.
func TestCreateGarbledAnswer(t *testing.T) {
	f := newMemFake(t)
	for name, body := range map[string]string{"cut short": `{"id":"abc","sta`, "no id": `{}`, "html": `<html>ok</html>`} {
		t.Run(name, func(t *testing.T) {
			p := newProvider(t, f, func(o *daytona.Options) { o.HTTPClient = &http.Client{Transport: mangleCreate{body}} })
			calls := f.Calls("createSandbox")
			h, err := p.Create(t.Context(), memSpec(t))
			require.NoError(t, err)
			require.Equal(t, 1, f.Calls("createSandbox")-calls, "not sent again")
			require.Equal(t, 1, f.Count())
			require.NoError(t, p.Destroy(t.Context(), h))
			require.Zero(t, f.Count())
		})
	}
}

// dropLabelFilter sends listings without their labels filter, as an API that ignored it would.
type dropLabelFilter struct{}

func (dropLabelFilter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/api/sandbox") {
		r = r.Clone(r.Context())
		q := r.URL.Query()
		q.Del("labels")
		r.URL.RawQuery = q.Encode()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestListTrustsNoFilter: what List returns is what the reaper destroys, and a create's lookup
// adopts what it finds; neither may take a sandbox without the labels asked for, even when the API
// answers with more.
func TestListTrustsNoFilter(t *testing.T) {
	f := newMemFake(t)
	p := newProvider(t, f, nil)
	other := memSpec(t)
	other.Labels.Deployment = "someone-else"
	ho, err := p.Create(t.Context(), other)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.WithoutCancel(t.Context()), ho) })

	lax := newProvider(t, f, func(o *daytona.Options) { o.HTTPClient = &http.Client{Transport: dropLabelFilter{}} })
	list, err := lax.List(t.Context(), map[string]string{sandbox.LabelDeployment: "faults"})
	require.NoError(t, err)
	require.Empty(t, list, "another deployment's sandbox is not ours to reap")

	// A lost create answer: the lookup must find this create's sandbox, not the other one.
	f.Inject(daytonafake.Fault{Op: "createSandbox", Status: http.StatusBadGateway})
	h, err := lax.Create(t.Context(), memSpec(t))
	require.NoError(t, err)
	require.NotEqual(t, ho.ID, h.ID, "another sandbox adopted")
	require.NoError(t, lax.Destroy(t.Context(), h))
}
