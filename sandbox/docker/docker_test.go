package docker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	p := dockertest.New(t, docker.Options{})
	raw := rawClient(t)
	sandboxtest.Run(t, sandboxtest.Config{
		New:        func(*testing.T) sandbox.Provider { return p },
		Image:      dockertest.Image(),
		Deployment: "conformance",
		RemoveOutOfBand: func(t *testing.T, h sandbox.Handle) {
			// docker rm -f: the container goes, its named volume stays.
			require.NoError(t, raw.ContainerRemove(t.Context(), h.ID, container.RemoveOptions{Force: true}))
		},
		StopOutOfBand: func(t *testing.T, h sandbox.Handle) {
			require.NoError(t, raw.ContainerStop(t.Context(), h.ID, container.StopOptions{}))
		},
	})
}

// rawClient talks to the engine directly, behind the provider's back.
func rawClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func testSpec(t *testing.T) sandbox.Spec {
	return sandbox.Spec{
		Image:  dockertest.Image(),
		Labels: sandbox.Labels{Deployment: "dockertest-" + strings.ToLower(t.Name()[len("Test"):]), Thread: "t", Generation: 3},
	}
}

func create(t *testing.T, p *docker.Provider, spec sandbox.Spec) sandbox.Handle {
	t.Helper()
	h, err := p.Create(t.Context(), spec)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	return h
}

func sh(t *testing.T, p *docker.Provider, h sandbox.Handle, script string) string {
	t.Helper()
	var out, errOut strings.Builder
	res, err := p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%q: %s", script, errOut.String())
	return strings.TrimSpace(out.String())
}

func volumeOf(t *testing.T, h sandbox.Handle) string {
	var st struct {
		Volume string `json:"volume"`
	}
	require.NoError(t, json.Unmarshal(h.State, &st))
	require.NotEmpty(t, st.Volume)
	return st.Volume
}

// A work directory the image lacks starts as a root-owned volume; the provider hands it to the user,
// on a read-only root too (through a helper container), and with a user given by name.
func TestWorkDirOwnership(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	for _, tc := range []struct {
		name     string
		user     string
		readOnly bool
		want     string
	}{
		{"writable root", "", false, "1000:1000"},
		{"read-only root", "", true, "1000:1000"},
		{"user by name", "agent", false, "1000:1000"},
		{"name and group", "agent:agent", true, "1000:1000"},
		{"uid without group in passwd", "1000", false, "1000:1000"},
		{"uid unknown to passwd", "4321", false, "4321:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(t)
			spec.WorkDir, spec.User, spec.ReadOnlyRoot = "/home/agent/work", tc.user, tc.readOnly
			h := create(t, p, spec)
			require.Equal(t, "/home/agent/work "+tc.want, sh(t, p, h, `echo "$PWD $(stat -c %u:%g .)"`))
			require.Equal(t, tc.want, sh(t, p, h, `echo "$(id -u):$(id -g)"`))
			require.NoError(t, p.WriteFile(t.Context(), h, "a/b.txt", []byte("x"), 0o644))
			require.Equal(t, tc.want+" "+tc.want, sh(t, p, h, "echo $(stat -c %u:%g a a/b.txt)"))
		})
	}
	t.Run("unknown user", func(t *testing.T) {
		spec := testSpec(t)
		spec.User = "nosuchuser"
		_, err := p.Create(t.Context(), spec)
		require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
	})
}

// The work volume carries the sandbox's labels and goes with Destroy, also after docker rm -f.
func TestVolumeLifecycle(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	raw := rawClient(t)
	spec := testSpec(t)

	h := create(t, p, spec)
	vol := volumeOf(t, h)
	v, err := raw.VolumeInspect(t.Context(), vol)
	require.NoError(t, err)
	require.Equal(t, spec.Labels, sandbox.ParseLabels(v.Labels))
	require.NoError(t, p.Destroy(t.Context(), h))
	_, err = raw.VolumeInspect(t.Context(), vol)
	require.True(t, cerrdefs.IsNotFound(err), "volume removed with the sandbox: %v", err)

	h = create(t, p, spec)
	vol = volumeOf(t, h)
	require.NoError(t, raw.ContainerRemove(t.Context(), h.ID, container.RemoveOptions{Force: true}))
	_, err = raw.VolumeInspect(t.Context(), vol)
	require.NoError(t, err, "docker rm -f leaves the named volume")
	require.NoError(t, p.Destroy(t.Context(), h))
	_, err = raw.VolumeInspect(t.Context(), vol)
	require.True(t, cerrdefs.IsNotFound(err), "Destroy after rm -f frees the volume: %v", err)

	// Destroy racing a docker rm -f of the same sandbox (the daemon answers the loser "removal
	// already in progress") still succeeds, and frees the volume once the container is gone.
	for range 3 {
		h = create(t, p, spec)
		vol = volumeOf(t, h)
		rm := make(chan error, 1)
		go func() { rm <- raw.ContainerRemove(t.Context(), h.ID, container.RemoveOptions{Force: true}) }()
		require.NoError(t, p.Destroy(t.Context(), h), "Destroy beside a concurrent removal")
		if err := <-rm; err != nil && !cerrdefs.IsNotFound(err) {
			require.Contains(t, err.Error(), "already in progress", "the other remover lost the race")
		}
		_, err = raw.VolumeInspect(t.Context(), vol)
		require.True(t, cerrdefs.IsNotFound(err), "volume freed after a racing removal: %v", err)
	}

	// Nothing of this deployment is left: no container, no volume.
	args := filters.NewArgs(filters.Arg("label", sandbox.LabelDeployment+"="+spec.Labels.Deployment))
	cs, err := raw.ContainerList(t.Context(), container.ListOptions{All: true, Filters: args})
	require.NoError(t, err)
	require.Empty(t, cs)
	vs, err := raw.VolumeList(t.Context(), volume.ListOptions{Filters: args})
	require.NoError(t, err)
	require.Empty(t, vs.Volumes)
}

// A handle survives JSON (it is stored in the session row), and a handle without its state (as
// from List, or hand-built) still works: the provider recomputes the state from the container.
func TestHandle(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	spec := testSpec(t)
	spec.User = "agent"
	h := create(t, p, spec)
	require.Equal(t, "docker", h.Provider)
	require.Equal(t, 1, h.Version)

	raw, err := json.Marshal(h)
	require.NoError(t, err)
	var back sandbox.Handle
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, h.ID, back.ID)
	require.JSONEq(t, string(h.State), string(back.State))
	info, err := p.Inspect(t.Context(), back)
	require.NoError(t, err)
	require.Equal(t, sandbox.StateRunning, info.State)
	require.Equal(t, "agent", info.User)
	require.JSONEq(t, string(h.State), string(info.Handle.State))

	bare := sandbox.Handle{Provider: "docker", ID: h.ID}
	require.NoError(t, p.WriteFile(t.Context(), bare, "bare.txt", []byte("x"), 0o644))
	require.Equal(t, "1000:1000", sh(t, p, bare, "stat -c %u:%g bare.txt"))
	require.Equal(t, "/workspace", sh(t, p, bare, "pwd"))

	vol := volumeOf(t, h)
	require.NoError(t, p.Destroy(t.Context(), bare), "Destroy finds the volume itself")
	_, err = rawClient(t).VolumeInspect(t.Context(), vol)
	require.True(t, cerrdefs.IsNotFound(err), "%v", err)

	_, err = p.Inspect(t.Context(), sandbox.Handle{Provider: "daytona", ID: h.ID})
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec, "another provider's handle")
}

// Options.Deployment fences the provider to one deployment.
func TestDeploymentFence(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{Deployment: "dockertest-fence"})
	other := dockertest.New(t, docker.Options{})
	spec := testSpec(t)
	spec.Labels.Deployment = ""
	h := create(t, p, spec)
	info, err := p.Inspect(t.Context(), h)
	require.NoError(t, err)
	require.Equal(t, "dockertest-fence", info.Labels[sandbox.LabelDeployment], "filled in")

	spec.Labels.Deployment = "dockertest-elsewhere"
	_, err = p.Create(t.Context(), spec)
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
	require.ErrorIs(t, err, sandbox.ErrNoEffect)

	elsewhere := create(t, other, spec)
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: "dockertest-elsewhere"})
	require.NoError(t, err)
	require.Empty(t, list, "a fenced provider never lists another deployment")
	list, err = other.List(t.Context(), map[string]string{sandbox.LabelDeployment: "dockertest-elsewhere"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, elsewhere.ID, list[0].Handle.ID)
}

// Errors a caller acts on: missing image is invalid and had no effect; file errors tell a missing
// path from a missing sandbox.
func TestErrors(t *testing.T) {
	t.Parallel()
	p := dockertest.New(t, docker.Options{})
	spec := testSpec(t)
	spec.Image = "threadbox/no-such-image:never"
	_, err := p.Create(t.Context(), spec)
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
	require.ErrorIs(t, err, sandbox.ErrNoEffect, "the volume was removed again: safe to retry")

	h := create(t, p, testSpec(t))
	_, err = p.ReadFile(t.Context(), h, "missing", 10)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.False(t, errors.Is(err, sandbox.ErrNotFound))
	require.NoError(t, p.Destroy(t.Context(), h))
	_, err = p.ReadFile(t.Context(), h, "missing", 10)
	require.ErrorIs(t, err, sandbox.ErrNotFound, "the sandbox is gone")
	require.False(t, errors.Is(err, fs.ErrNotExist))
	_, err = p.Dial(t.Context(), h, 80)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
	_, err = p.Stats(t.Context(), h)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
}

// TestVolumeReaper: after docker rm -f (no -v), the sandbox's work volume is listed as unused and can
// be removed; a volume still mounted (even by a stopped container) is listed as in use and refused.
func TestVolumeReaper(t *testing.T) {
	p := dockertest.New(t, docker.Options{})
	raw := rawClient(t)
	spec := testSpec(t)
	labels := map[string]string{sandbox.LabelDeployment: spec.Labels.Deployment}
	gone := create(t, p, spec)
	kept := create(t, p, spec)
	require.NoError(t, p.Stop(t.Context(), kept))
	require.NoError(t, raw.ContainerRemove(t.Context(), gone.ID, container.RemoveOptions{Force: true}))

	vols, err := p.ListVolumes(t.Context(), labels)
	require.NoError(t, err)
	inUse := map[string]bool{}
	for _, v := range vols {
		inUse[v.Name] = v.InUse
		require.Equal(t, spec.Labels.Deployment, v.Labels[sandbox.LabelDeployment])
		require.False(t, v.CreatedAt.IsZero(), "the age is reported")
	}
	require.Equal(t, map[string]bool{volumeOf(t, gone): false, volumeOf(t, kept): true}, inUse)

	require.ErrorIs(t, p.RemoveVolume(t.Context(), volumeOf(t, kept)), docker.ErrVolumeInUse)
	require.NoError(t, p.RemoveVolume(t.Context(), volumeOf(t, gone)))
	require.NoError(t, p.RemoveVolume(t.Context(), volumeOf(t, gone)), "a missing volume is success")
	vols, err = p.ListVolumes(t.Context(), labels)
	require.NoError(t, err)
	require.Len(t, vols, 1)
	require.Equal(t, volumeOf(t, kept), vols[0].Name)
}

// The archive endpoint sends the second name of a hard-linked file as a link entry with no size;
// the listing must still report it as the regular file it is, with its size (the artifact collector
// skips an oversized file on its listed size without reading it).
func TestListFilesHardlinks(t *testing.T) {
	p := dockertest.New(t, docker.Options{})
	h := create(t, p, testSpec(t))
	sh(t, p, h, `mkdir -p out/sub && head -c 5000 /dev/zero > out/a && ln out/a out/sub/b && ln out/a out/z`)
	list, err := p.ListFiles(t.Context(), h, "out")
	require.NoError(t, err)
	got := map[string]int64{}
	for _, e := range list {
		if e.Mode.IsRegular() {
			got[e.Path] = e.Size
		}
	}
	require.Equal(t, map[string]int64{"a": 5000, "sub/b": 5000, "z": 5000}, got)
}

// Hardening is not optional (containerConfig): every exec runs without capabilities, even in its
// bounding set, and cannot gain privileges through setuid binaries. Nothing else checks that it is
// really applied.
func TestHardeningApplied(t *testing.T) {
	p := dockertest.New(t, docker.Options{})
	h := create(t, p, testSpec(t))
	status := sh(t, p, h, `grep -E '^(Uid|Cap(Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status /proc/1/status | tr -s ' \t' ' '`)
	for _, who := range []string{"/proc/self/status", "/proc/1/status"} {
		for _, want := range []string{"Uid: 1000 1000 1000 1000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
			"CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1"} {
			require.Contains(t, status, who+":"+want, "%s of the exec (self) and the main process (1)", want)
		}
	}
}
