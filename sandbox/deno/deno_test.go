package deno_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// baseSnapshot is the fake's one base snapshot (an empty /workspace on the test image).
const baseSnapshot = "tb-base"

func newFake(t testing.TB, mod func(*denofake.Options)) *denofake.Fake {
	t.Helper()
	backend := dockertest.New(t, docker.Options{})
	opts := denofake.Options{Backend: backend, Image: dockertest.Image(), Snapshots: []string{baseSnapshot}}
	if mod != nil {
		mod(&opts)
	}
	return denofake.New(t, opts)
}

func newProvider(t testing.TB, f *denofake.Fake, mod func(*deno.Options)) *deno.Provider {
	t.Helper()
	opts := deno.Options{Token: denofake.Token, ConsoleURL: f.ConsoleURL(), SandboxURL: f.SandboxURL(),
		DetachTimeout: time.Minute, Retries: 3, Logger: zaptest.NewLogger(t)}
	if mod != nil {
		mod(&opts)
	}
	p, err := deno.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f, nil)
	sandboxtest.Run(t, sandboxtest.Config{
		New:        func(*testing.T) sandbox.Provider { return p },
		Image:      baseSnapshot,
		Deployment: "deno-conformance",
		RemoveOutOfBand: func(t *testing.T, h sandbox.Handle) {
			f.RemoveOutOfBand(deno.LabelBox, h.ID, h.ID+"-")
		},
		StopOutOfBand: func(t *testing.T, h sandbox.Handle) {
			info, err := p.Inspect(t.Context(), h)
			require.NoError(t, err)
			require.Equal(t, sandbox.StateRunning, info.State)
			for _, id := range f.SandboxIDs(deno.LabelBox, h.ID) {
				f.StopOutOfBand(id)
			}
		},
	})
}
