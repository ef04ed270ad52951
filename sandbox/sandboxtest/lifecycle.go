package sandboxtest

import (
	"context"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
)

// testLifecycle: create → running → stop → stopped (files kept, exec refused) → start → exec works
// → destroy → ErrNotFound, and a second Destroy succeeds.
func (s *suite) testLifecycle(t *testing.T) {
	ctx := t.Context()
	spec := s.spec(t)
	h := s.create(t, spec)
	require.Equal(t, s.p.Name(), h.Provider, "handle names its provider")

	info, err := s.p.Inspect(ctx, h)
	require.NoError(t, err)
	require.Equal(t, sandbox.StateRunning, info.State)
	require.Equal(t, h.ID, info.Handle.ID)
	require.Equal(t, spec.Labels, sandbox.ParseLabels(info.Labels), "labels carried by the sandbox")
	require.Equal(t, spec.Image, info.Image)
	require.WithinDuration(t, time.Now(), info.CreatedAt, 10*time.Minute, "CreatedAt is set")
	if s.caps.NetworkNone {
		require.Equal(t, sandbox.NetworkNone, info.Network, "network none is the default")
	}

	require.NoError(t, s.p.WriteFile(ctx, h, "kept.txt", []byte("survives stop"), 0o644))
	require.NoError(t, s.p.Start(ctx, h), "Start on a running sandbox is a no-op")

	require.NoError(t, s.p.Stop(ctx, h))
	require.NoError(t, s.p.Stop(ctx, h), "Stop on a stopped sandbox is a no-op")
	info, err = s.p.Inspect(ctx, h)
	require.NoError(t, err)
	require.Equal(t, sandbox.StateStopped, info.State)
	in := &watchedStdin{}
	_, err = s.p.Exec(ctx, h, sandbox.ExecRequest{Cmd: []string{"true"}, Stdin: in})
	requireIs(t, err, sandbox.ErrNotRunning, "Exec on a stopped sandbox")
	require.False(t, in.read.Load(), "Exec on a stopped sandbox reads none of its stdin")

	require.NoError(t, s.p.Start(ctx, h))
	info, err = s.p.Inspect(ctx, h)
	require.NoError(t, err)
	require.Equal(t, sandbox.StateRunning, info.State)
	require.Equal(t, "survives stop", s.ok(t, h, "cat kept.txt"), "work dir kept across stop/start")
	data, err := s.p.ReadFile(ctx, h, "kept.txt", 1<<10)
	require.NoError(t, err)
	require.Equal(t, "survives stop", string(data))

	require.NoError(t, s.p.Destroy(ctx, h))
	_, err = s.p.Inspect(ctx, h)
	requireIs(t, err, sandbox.ErrNotFound, "Inspect after Destroy")
	_, err = s.p.Exec(ctx, h, sandbox.ExecRequest{Cmd: []string{"true"}})
	requireIs(t, err, sandbox.ErrNotFound, "Exec after Destroy")
	require.NoError(t, s.p.Destroy(ctx, h), "a second Destroy succeeds")
}

// testOutOfBand: what the resolver relies on to heal after docker rm -f / docker stop.
func (s *suite) testOutOfBand(t *testing.T) {
	if !s.caps.OutOfBand {
		t.Skip("provider declares no out-of-band control")
	}
	t.Run("Remove", func(t *testing.T) {
		if s.cfg.RemoveOutOfBand == nil {
			t.Skip("no RemoveOutOfBand hook")
		}
		h := s.create(t, s.spec(t))
		s.cfg.RemoveOutOfBand(t, h)
		_, err := s.p.Inspect(t.Context(), h)
		requireIs(t, err, sandbox.ErrNotFound, "Inspect after out-of-band remove")
		in := &watchedStdin{}
		_, err = s.p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"true"}, Stdin: in})
		requireIs(t, err, sandbox.ErrNotFound, "Exec after out-of-band remove")
		require.False(t, in.read.Load(), "Exec on a removed sandbox reads none of its stdin")
		require.NoError(t, s.p.Destroy(t.Context(), h), "Destroy of a removed sandbox succeeds")
	})
	t.Run("Stop", func(t *testing.T) {
		if s.cfg.StopOutOfBand == nil {
			t.Skip("no StopOutOfBand hook")
		}
		h := s.create(t, s.spec(t))
		s.cfg.StopOutOfBand(t, h)
		in := &watchedStdin{}
		_, err := s.p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"true"}, Stdin: in})
		requireIs(t, err, sandbox.ErrNotRunning, "Exec after out-of-band stop")
		require.False(t, in.read.Load(), "Exec on a sandbox stopped behind the provider's back reads none of its stdin")
		info, err := s.p.Inspect(t.Context(), h)
		require.NoError(t, err)
		require.Equal(t, sandbox.StateStopped, info.State)
		require.NoError(t, s.p.Start(t.Context(), h))
		require.Equal(t, "ok", s.ok(t, h, "echo ok"))
	})
}

// watchedStdin is an exec's stdin that notes whether it was read. The runtimes take a read as "the
// command may have got its input" (the prompt, the shell's start line): an Exec that fails because
// the sandbox is not running must not read it, or they would report a prompt that never left as one
// the agent may be running, and the pool would not send it again.
type watchedStdin struct{ read atomic.Bool }

func (w *watchedStdin) Read(p []byte) (int, error) {
	w.read.Store(true)
	return copy(p, "x"), io.EOF
}

// testInvalidSpec: specs that can never work fail with ErrInvalidSpec, and leave nothing behind.
func (s *suite) testInvalidSpec(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*sandbox.Spec)
	}{
		{"root by name", func(sp *sandbox.Spec) { sp.User = "root" }},
		{"root by uid", func(sp *sandbox.Spec) { sp.User = "0" }},
		{"root uid:gid", func(sp *sandbox.Spec) { sp.User = "0:0" }},
		{"missing image", func(sp *sandbox.Spec) { sp.Image = "threadbox/does-not-exist:never" }},
		{"no image", func(sp *sandbox.Spec) { sp.Image = "" }},
		{"no deployment label", func(sp *sandbox.Spec) { sp.Labels.Deployment = "" }},
		{"relative workdir", func(sp *sandbox.Spec) { sp.WorkDir = "work" }},
		{"bad network", func(sp *sandbox.Spec) { sp.Network = "host" }},
		{"memory out of range", func(sp *sandbox.Spec) { sp.Resources = sandbox.DefaultResources(); sp.Resources.MemoryMB = 1 }},
		{"bad env name", func(sp *sandbox.Spec) { sp.Env = map[string]string{"1BAD": "x"} }},
	}
	dep := s.deployment()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "missing image" && !s.caps.Isolated {
				t.Skip("provider runs on the host: it has no images")
			}
			spec := s.spec(t)
			spec.Labels.Deployment = dep
			tc.mut(&spec)
			h, err := s.p.Create(t.Context(), spec)
			if err == nil {
				s.cleanup(t, h)
			}
			requireIs(t, err, sandbox.ErrInvalidSpec)
		})
	}
	list, err := s.p.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
	require.NoError(t, err)
	require.Empty(t, list, "a refused Create leaves nothing behind")
}

// testList: List filters by labels, so each deployment sees only its own sandboxes, in any state.
func (s *suite) testList(t *testing.T) {
	ctx := t.Context()
	specA, specB := s.spec(t), s.spec(t)
	a1, a2, b := s.create(t, specA), s.create(t, specA), s.create(t, specB)
	require.NoError(t, s.p.Stop(ctx, a2), "List also returns stopped sandboxes")

	ids := func(dep string) map[string]sandbox.State {
		list, err := s.p.List(ctx, map[string]string{sandbox.LabelDeployment: dep})
		require.NoError(t, err)
		out := map[string]sandbox.State{}
		for _, info := range list {
			require.Equal(t, dep, info.Labels[sandbox.LabelDeployment])
			out[info.Handle.ID] = info.State
		}
		return out
	}
	require.Equal(t, map[string]sandbox.State{a1.ID: sandbox.StateRunning, a2.ID: sandbox.StateStopped}, ids(specA.Labels.Deployment))
	require.Equal(t, map[string]sandbox.State{b.ID: sandbox.StateRunning}, ids(specB.Labels.Deployment))

	// A handle from List is good enough to destroy with (the reaper has nothing else).
	list, err := s.p.List(ctx, map[string]string{
		sandbox.LabelDeployment: specB.Labels.Deployment,
		sandbox.LabelThread:     specB.Labels.Thread,
		sandbox.LabelGeneration: strconv.FormatInt(specB.Labels.Generation, 10),
	})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, s.p.Destroy(ctx, list[0].Handle))
	require.Empty(t, ids(specB.Labels.Deployment))
}

// testConcurrent: 20 create+destroy cycles at once leave nothing behind.
func (s *suite) testConcurrent(t *testing.T) {
	const n = 20
	spec := s.spec(t)
	dep := spec.Labels.Deployment
	t.Cleanup(func() {
		// Whatever a failed cycle left, destroy it, so one failure does not leak twenty sandboxes.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, _ := s.p.List(ctx, map[string]string{sandbox.LabelDeployment: dep})
		for _, info := range list {
			_ = s.p.Destroy(ctx, info.Handle)
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sp := spec
			sp.Labels.Thread = "test:concurrent:" + strconv.Itoa(i)
			h, err := s.p.Create(t.Context(), sp)
			if err != nil {
				errs <- err
				return
			}
			errs <- s.p.Destroy(t.Context(), h)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	list, err := s.p.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
	require.NoError(t, err)
	require.Empty(t, list, "no sandbox left behind")
}
