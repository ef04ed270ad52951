package agentpool

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/sandboxtest"
)

// maintTestImage is the FROM-scratch busybox image deploy/test-services.sh builds.
const maintTestImage = "threadbox/sandbox-test:latest"

// maintDocker connects to the real engine, fenced to deployment ("" for no fence), or skips (fails
// under THREADBOX_REQUIRE_SERVICES) when Docker or the test image is missing.
func maintDocker(t *testing.T, deployment string) *docker.Provider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := docker.New(ctx, docker.Options{Deployment: deployment, StopTimeout: time.Second})
	sandboxtest.RequireService(t, "docker", err)
	t.Cleanup(func() { _ = p.Close() })
	sandboxtest.RequireService(t, "docker image "+maintTestImage, p.CheckImage(ctx, maintTestImage))
	return p
}

// maintDockerBox creates a real sandbox, destroyed when the test ends whatever the test did to it.
func maintDockerBox(t *testing.T, p *docker.Provider, deployment, thread string) sandbox.Handle {
	t.Helper()
	return provBox(t, p, maintTestImage, deployment, thread)
}

// dockerCLI creates fixtures the provider would refuse to make (containers without our labels).
func dockerCLI(t *testing.T, args ...string) string {
	t.Helper()
	_, err := exec.LookPath("docker")
	sandboxtest.RequireService(t, "docker CLI", err)
	out, err := exec.Command("docker", args...).CombinedOutput()
	require.NoError(t, err, "docker %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

func requireState(t *testing.T, p sandbox.Provider, h sandbox.Handle, want sandbox.State) {
	t.Helper()
	info, err := p.Inspect(context.Background(), h)
	require.NoError(t, err)
	require.Equal(t, want, info.State)
}

func TestDockerIdlePauseThenCleanup(t *testing.T) {
	forEachProvider(t, func(t *testing.T, env provEnv) {
		forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) { testIdlePauseThenCleanup(t, env, st, clock) })
	})
}

func testIdlePauseThenCleanup(t *testing.T, env provEnv, st db.Store, clock *dbtest.Clock) {
	ctx := context.Background()
	dep := "maint-" + maintRandom()
	p := env.open(t, dep)
	h := provBox(t, p, env.image, dep, "web:docker-idle")
	activeSessionFor(t, st, "web:docker-idle", h)
	m := newTestMaintainer(t, MaintainerConfig{}, st, p, dep, clock, nil)

	clock.Advance(DefaultIdleTimeout - time.Second)
	rep, err := m.IdlePass(ctx)
	require.NoError(t, err)
	require.Equal(t, PassReport{}, rep)
	requireState(t, p, h, sandbox.StateRunning)

	clock.Advance(2 * time.Second)
	rep, err = m.IdlePass(ctx)
	require.NoError(t, err)
	require.Equal(t, PassReport{Found: 1, Done: 1}, rep)
	requireState(t, p, h, sandbox.StateStopped)
	require.Equal(t, db.SessionPaused, sessionStatus(t, st, "web:docker-idle").Status)

	clock.Advance(DefaultPausedTTL - time.Second)
	rep, err = m.CleanupPass(ctx)
	require.NoError(t, err)
	require.Equal(t, PassReport{}, rep)
	requireState(t, p, h, sandbox.StateStopped)

	clock.Advance(2 * time.Second)
	rep, err = m.CleanupPass(ctx)
	require.NoError(t, err)
	require.Equal(t, PassReport{Found: 1, Done: 1}, rep)
	_, err = p.Inspect(ctx, h)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
	require.Equal(t, db.SessionDestroyed, sessionStatus(t, st, "web:docker-idle").Status)
}

func TestDockerReaperTouchesOnlyOwnOrphans(t *testing.T) {
	forEachProvider(t, func(t *testing.T, env provEnv) {
		forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) { testReaperOwnOrphans(t, env, st, clock) })
	})
}

func testReaperOwnOrphans(t *testing.T, env provEnv, st db.Store, clock *dbtest.Clock) {
	ctx := context.Background()
	dep := "reap-" + maintRandom()
	// The reaper gets an unfenced provider: its own filter and label check are what must keep it
	// inside its deployment.
	p := env.open(t, "")
	other := env.open(t, dep+"-other")

	owned := provBox(t, p, env.image, dep, "web:owned")
	activeSessionFor(t, st, "web:owned", owned)
	orphan := provBox(t, p, env.image, dep, "web:orphan") // its session row was never saved
	neighbour := provBox(t, other, env.image, dep+"-other", "web:neighbour")
	strays := []sandbox.Handle{env.stray(t, nil), env.stray(t, map[string]string{sandbox.LabelThread: "web:x"})}
	m := newTestMaintainer(t, MaintainerConfig{}, st, p, dep, clock, nil)

	rep, err := m.ReapPass(ctx, false)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Listed)
	require.Empty(t, rep.Orphans, "within the grace period nothing is an orphan yet")

	clock.Advance(DefaultReapGrace + time.Minute)
	rep, err = m.ReapPass(ctx, true)
	require.NoError(t, err)
	require.Equal(t, []string{orphan.ID}, infoIDs(rep.Orphans))
	require.Zero(t, rep.Destroyed)
	requireState(t, p, orphan, sandbox.StateRunning)

	rep, err = m.ReapPass(ctx, false)
	require.NoError(t, err)
	require.Equal(t, []string{orphan.ID}, infoIDs(rep.Orphans))
	require.Equal(t, 1, rep.Destroyed)
	_, err = p.Inspect(ctx, orphan)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
	requireState(t, p, owned, sandbox.StateRunning)
	requireState(t, p, neighbour, sandbox.StateRunning)
	for _, h := range strays {
		requireExists(t, p, h)
	}
}

// TestDockerRecreateAfterRmLeavesNoVolume: docker rm -f (without -v) between turns leaves the work
// volume behind; the turn recreates the sandbox, and the reaper removes the old volume once it is
// older than the grace, so the labelled containers and volumes equal the live sessions again. A
// volume of another deployment, and the live sandbox's, are kept.
func TestDockerRecreateAfterRmLeavesNoVolume(t *testing.T) {
	st := dbtest.OpenPostgres(t)
	f := newDockerFixture(t, st)
	sink := newCollector()
	submit(t, f.pool, "web:vol", "e1", "echo first", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)
	old := mustHandle(t, sessionStatus(t, st, "web:vol"))
	oldVol := handleVolume(t, old)
	dockerCLI(t, "rm", "-f", old.ID)

	submit(t, f.pool, "web:vol", "e2", "echo second", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, RecreateGone, out.Recreate)
	cur := mustHandle(t, sessionStatus(t, st, "web:vol"))
	neighbourVol := "tbx-neighbour-" + maintRandom()
	dockerCLI(t, "volume", "create", "--label", sandbox.LabelDeployment+"="+f.deployment+"-other", neighbourVol)
	t.Cleanup(func() { dockerCLI(t, "volume", "rm", "-f", neighbourVol) })

	clock := dbtest.NewClock(time.Now().UTC())
	m := newTestMaintainer(t, MaintainerConfig{}, st, f.docker, f.deployment, clock, nil)
	rep, err := m.ReapPass(t.Context(), false)
	require.NoError(t, err)
	require.Empty(t, rep.OrphanVolumes, "within the grace nothing is an orphan")

	clock.Advance(DefaultReapGrace + time.Minute)
	rep, err = m.ReapPass(t.Context(), false)
	require.NoError(t, err)
	require.Empty(t, rep.Orphans)
	require.Len(t, rep.OrphanVolumes, 1)
	require.Equal(t, oldVol, rep.OrphanVolumes[0].Name)
	require.Equal(t, 1, rep.VolumesRemoved)

	vols, err := f.docker.ListVolumes(t.Context(), map[string]string{sandbox.LabelDeployment: f.deployment})
	require.NoError(t, err)
	require.Len(t, vols, 1, "one volume per live session")
	require.Equal(t, handleVolume(t, cur), vols[0].Name)
	require.Len(t, f.sandboxes(t), 1, "one container per live session")
	dockerCLI(t, "volume", "inspect", neighbourVol) // still there
}

func handleVolume(t *testing.T, h sandbox.Handle) string {
	t.Helper()
	var st struct {
		Volume string `json:"volume"`
	}
	require.NoError(t, json.Unmarshal(h.State, &st))
	require.NotEmpty(t, st.Volume)
	return st.Volume
}
