package daytona_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// newFake starts a fake Daytona on real Docker sandboxes (the test image as its one snapshot) and
// fails the test at the end if any request broke the specs.
func newFake(t testing.TB) *daytonafake.Fake {
	t.Helper()
	backend := dockertest.New(t, docker.Options{})
	f := daytonafake.New(t, daytonafake.Options{Backend: backend, Snapshots: []string{dockertest.Image()}})
	t.Cleanup(func() {
		require.Empty(t, f.Violations(), "requests that break Daytona's specs")
	})
	return f
}

func newProvider(t testing.TB, f *daytonafake.Fake, mod func(*daytona.Options)) *daytona.Provider {
	t.Helper()
	opts := daytona.Options{APIURL: f.APIURL(), APIKey: daytonafake.APIKey, StateTimeout: 2 * time.Minute}
	if mod != nil {
		mod(&opts)
	}
	p, err := daytona.New(opts)
	require.NoError(t, err)
	return p
}

func TestConformance(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	sandboxtest.Run(t, sandboxtest.Config{
		New:        func(*testing.T) sandbox.Provider { return p },
		Image:      dockertest.Image(),
		Deployment: "daytona-conformance",
		RemoveOutOfBand: func(t *testing.T, h sandbox.Handle) {
			require.NoError(t, f.RemoveOutOfBand(t.Context(), h.ID))
		},
		StopOutOfBand: func(t *testing.T, h sandbox.Handle) {
			require.NoError(t, f.StopOutOfBand(t.Context(), h.ID))
		},
		Skip: map[string]string{
			"Dial": "Daytona reaches ports through its HTTP preview proxy, not raw TCP: TestDialPreview covers it",
		},
	})
}
