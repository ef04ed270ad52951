package agentpool

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	agentrt "github.com/threadbox/threadbox/agentpool/runtime"
	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestDockerChaosLeavesNoLeaks runs rounds of turns on several threads on real Docker and
// PostgreSQL, and between rounds does what breaks sandboxes in production: docker rm -f (the volume
// stays), docker stop, a crash that leaves a session half-way (resuming, creating, pausing,
// destroying, error), a crash inside Create that leaves a sandbox no session knows; and once a daemon
// restart (through a socket proxy: connections cut, then refused; the shared engine itself is not
// restarted) that every turn of a round must wait out. Every turn must be answered, and after one
// round of the loops (idle-pause, reconcile, reaper) the labelled containers and volumes are exactly
// the live sessions': none leaked, none duplicated.
func TestDockerChaosLeavesNoLeaks(t *testing.T) {
	// make test runs 64 turns; THREADBOX_CHAOS=full runs the acceptance size, 200 turns on 20 threads.
	threads, rounds := 8, 8
	if os.Getenv("THREADBOX_CHAOS") == "full" {
		threads, rounds = 20, 10
	}
	st := dbtest.OpenPostgres(t)
	dep := "chaos-" + randomSuffix()
	direct := dockertest.New(t, docker.Options{Deployment: dep}) // for the checks and the cleanup
	t.Cleanup(func() { destroyDeployment(t, direct, dep) })
	proxy := newDaemonProxy(t)
	prov := dockertest.New(t, docker.Options{Host: "unix://" + proxy.path, Deployment: dep})
	rt := &recordingRuntime{Runtime: shellrt.New()}
	f := dockerFixture{provFixture: provFixture{
		fixture:    newFixture(t, st, prov, rt, func(c *Config) { c.Deployment = dep; c.Image = dockertest.Image() }),
		env:        dockerEnv(t),
		deployment: dep,
		rt:         rt,
	}, docker: direct}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	ctx := t.Context()
	stranded := []db.SessionStatus{db.SessionResuming, db.SessionCreating, db.SessionPausing, db.SessionDestroying, db.SessionError}
	counts := map[string]int{}

	for round := range rounds {
		sink := newCollector()
		waiting := make(chan struct{}, threads)
		outage := round == rounds/2 // the daemon restarts: every turn of this round meets it
		if outage {
			counts["daemon restart"]++
			proxy.down()
		}
		for i := range threads {
			submit(t, f.pool, fmt.Sprint("web:chaos-", i), fmt.Sprintf("e%d-%d", round, i), fmt.Sprintf("echo r%d", round), SinkFuncs{
				ProgressFunc: func(ev agentrt.Event) {
					if ev.Kind == agentrt.EventStatus && ev.Note == NoteWaitingForProvider {
						waiting <- struct{}{}
					}
				},
				DeliverFunc: sink.Deliver,
			})
		}
		if outage {
			for range threads {
				<-waiting
			}
			proxy.up(t)
		}
		for _, out := range sink.wait(t, threads) {
			require.NoError(t, out.Err, "round %d: every turn is answered", round)
			require.Equal(t, fmt.Sprintf("r%d", round), out.Answer)
		}
		// Chaos between rounds, on a few random threads, one thing each.
		for _, n := range rng.Perm(threads)[:3] {
			th := fmt.Sprint("web:chaos-", n)
			s := sessionStatus(t, st, th)
			h := mustHandle(t, s)
			switch action := rng.IntN(5); action {
			case 0:
				counts["docker rm -f"]++
				dockerCLI(t, "rm", "-f", h.ID)
			case 1:
				counts["docker stop"]++
				dockerCLI(t, "stop", "-t", "0", h.ID)
			case 2:
				to := stranded[rng.IntN(len(stranded))]
				counts["crash left "+string(to)]++
				_, err := st.SessionTransition(ctx, th, db.Transition{From: allStatuses, To: to})
				require.NoError(t, err)
			case 3:
				counts["crash inside create"]++
				_, err := f.docker.Create(ctx, f.pool.spec(s))
				require.NoError(t, err)
			case 4:
				counts["docker rm -f, then a crash left error"]++
				dockerCLI(t, "rm", "-f", h.ID)
				_, err := st.SessionTransition(ctx, th, db.Transition{From: allStatuses, To: db.SessionError})
				require.NoError(t, err)
			}
		}
	}
	// The last chaos is settled by the loops alone, with no turn to help: one round of passes, in
	// the order the leader runs them, once every grace has passed.
	clock := dbtest.NewClock(time.Now().UTC().Add(DefaultIdleTimeout + time.Minute))
	m := newTestMaintainer(t, MaintainerConfig{}, st, f.docker, f.deployment, clock, nil)
	m.lockWait = time.Second // nothing holds a thread lock now; a slow lock connection is no busy thread
	idle, err := m.IdlePass(ctx)
	require.NoError(t, err)
	require.Zero(t, idle.Failed, "%v", idle.Errors)
	rec, err := m.ReconcilePass(ctx)
	require.NoError(t, err)
	require.Zero(t, rec.Failed, "%v", rec.Errors)
	reap, err := m.ReapPass(ctx, false)
	require.NoError(t, err)
	require.Zero(t, reap.Failed, "%v", reap.Errors)

	var wantContainers, wantVolumes []string
	for i := range threads {
		s := sessionStatus(t, st, fmt.Sprint("web:chaos-", i))
		require.Contains(t, []db.SessionStatus{db.SessionPaused, db.SessionDestroyed}, s.Status, "settled")
		if s.Status == db.SessionDestroyed {
			continue
		}
		h := mustHandle(t, s)
		wantContainers = append(wantContainers, h.ID)
		wantVolumes = append(wantVolumes, handleVolume(t, h))
	}
	var gotContainers, gotVolumes []string
	for _, info := range deploymentSandboxes(t, f.docker, f.deployment) {
		gotContainers = append(gotContainers, info.Handle.ID)
	}
	vols, err := f.docker.ListVolumes(ctx, map[string]string{sandbox.LabelDeployment: f.deployment})
	require.NoError(t, err)
	for _, v := range vols {
		gotVolumes = append(gotVolumes, v.Name)
	}
	slices.Sort(wantContainers)
	slices.Sort(gotContainers)
	slices.Sort(wantVolumes)
	slices.Sort(gotVolumes)
	require.Equal(t, wantContainers, gotContainers, "labelled containers = live sessions")
	require.Equal(t, wantVolumes, gotVolumes, "labelled volumes = live sessions")
	t.Logf("%d turns on %d threads, all answered; chaos: %v; idle-paused %d, reconciled %d, reaped %d containers and %d volumes; %d sandboxes left, one per live session",
		threads*rounds, threads, counts, idle.Done, rec.Done, reap.Destroyed, reap.VolumesRemoved, len(gotContainers))
}
