package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestChaosThroughTheBinary: the real binary on Docker and SQLite, many Slack threads, and chaos while
// they work: the bot SIGKILLed mid-turn and restarted, sandboxes removed (docker rm -f) and stopped
// (docker stop) behind its back. Every message Slack got an ack for ends answered (✅, or ❌ with a
// reply), and afterwards the deployment's containers are exactly the live sessions' sandboxes: none
// leaked, none duplicated. THREADBOX_CHAOS=full runs 200 turns on 20 threads; the default is smaller.
func TestChaosThroughTheBinary(t *testing.T) {
	requireServices(t)
	threads, turns, kills := 6, 36, 2
	restartAt := -1 // the message after which the Docker daemon restarts; none by default
	if os.Getenv("THREADBOX_CHAOS") == "full" {
		threads, turns, kills = 20, 200, 4
		// A daemon restart stops every container on the machine, other packages' tests' too, so
		// it runs only when asked for (and never inside make test, which runs packages in parallel).
		if os.Getenv("THREADBOX_CHAOS_DOCKERD") == "restart" {
			restartAt = turns * 3 / 5
		}
	}
	prov := dockertest.New(t, docker.Options{})
	bin := buildBinary(t)
	const reapGrace = time.Minute
	dbPath := filepath.Join(t.TempDir(), "tb.db")
	rig := newCrashRig(t, "sqlite:"+dbPath)
	// One fake user sends every message, far faster than people type: the rate limit (tested on its
	// own) would skip most of them, so it is off here.
	rig.env = append(rig.env, "THREADBOX_LIFECYCLE_REAP_GRACE="+reapGrace.String(),
		"THREADBOX_RATELIMIT_USER_MESSAGES=-1", "THREADBOX_RATELIMIT_CHANNEL_MESSAGES=-1")
	dep := rig.deployment()
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))

	s := startServer(t, bin, rig.env)
	roots := make([]slackfake.Event, threads)
	var sent []slackfake.Event // every message Slack got an ack for
	send := func(ev slackfake.Event) {
		rig.deliver(t, s, ev)
		sent = append(sent, ev)
	}
	answered := func(ev slackfake.Event) bool {
		r := rig.fake.Reactions(ev.Channel, ev.TS)
		return slices.Contains(r, "white_check_mark") || slices.Contains(r, "x")
	}
	waitAll := func(what string) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		err := rig.fake.Wait(ctx, func() bool {
			for _, ev := range sent {
				if !answered(ev) {
					return false
				}
			}
			return true
		})
		var missing []string
		for _, ev := range sent {
			if !answered(ev) {
				missing = append(missing, ev.Text)
			}
		}
		require.NoError(t, err, "%s; unanswered: %v", what, missing)
	}
	killAt := map[int]bool{}
	for len(killAt) < kills {
		killAt[turns/4+rng.IntN(turns/2)] = true
	}
	for i := range turns {
		th := i % threads
		text := fmt.Sprintf("echo t%d-start; sleep 0.%d; echo t%d-end", i, rng.IntN(5), i)
		if i < threads {
			roots[th] = rig.fake.Mention("C1", "U1", text)
			send(roots[th])
		} else {
			send(rig.fake.Mention("C1", "U1", text, slackfake.InThread(roots[th].TS)))
		}
		switch {
		case killAt[i]:
			// At a random moment: mid-turn, mid-create, mid-post or between turns.
			t.Logf("chaos: SIGKILL after message %d", i)
			kill(t, s)
			s = startServer(t, bin, rig.env)
		case i == restartAt:
			t.Logf("chaos: restarting the Docker daemon after message %d", i)
			restartDockerd(t)
		case i%7 == 3:
			chaosOnSandbox(t, prov, dep, rng)
		}
	}

	waitAll("every acknowledged message is answered")
	ok := 0
	for _, ev := range sent {
		if slices.Contains(rig.fake.Reactions(ev.Channel, ev.TS), "white_check_mark") {
			ok++
		}
	}
	t.Logf("chaos: %d threads, %d messages acknowledged, %d answered ✅, %d answered ❌, %d bot kills", threads, len(sent), ok, len(sent)-ok, kills)

	kill(t, s) // the database is read below; SQLite allows one process
	st, err := db.Open(t.Context(), "sqlite:"+dbPath)
	require.NoError(t, err)
	defer st.Close()
	owned := map[string]string{}
	for _, status := range []db.SessionStatus{db.SessionActive, db.SessionPaused, db.SessionError} {
		page, err := st.SessionsByStatus(t.Context(), status, "", 1000)
		require.NoError(t, err)
		for _, sess := range page {
			if sess.SandboxID != "" {
				owned[sess.SandboxID] = sess.ThreadKey
			}
		}
	}
	// census counts the deployment's containers per owning thread, the containers no live session
	// owns, and the labelled volumes no container mounts.
	census := func() (perThread map[string]int, leaked []sandbox.Info, loose []sandbox.Volume) {
		list, err := prov.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
		require.NoError(t, err)
		perThread = map[string]int{}
		for _, info := range list {
			if thread, ok := owned[info.Handle.ID]; ok {
				perThread[thread]++
			} else {
				leaked = append(leaked, info)
			}
		}
		vols, err := prov.ListVolumes(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
		require.NoError(t, err)
		for _, v := range vols {
			if !v.InUse {
				loose = append(loose, v)
			}
		}
		return perThread, leaked, loose
	}
	perThread, leaked, loose := census()
	if len(leaked)+len(loose) > 0 {
		// A kill in the middle of a create leaves a container no session records, and a docker rm -f
		// leaves its volume: the reaper's cases. It removes them once older than reap_grace, so that
		// much time must pass.
		t.Logf("chaos: %d unattributed sandboxes and %d unmounted volumes; running the reaper after the grace", len(leaked), len(loose))
		require.NoError(t, st.Close())
		var newest time.Time
		for _, info := range leaked {
			if info.CreatedAt.After(newest) {
				newest = info.CreatedAt
			}
		}
		for _, v := range loose {
			if v.CreatedAt.After(newest) {
				newest = v.CreatedAt
			}
		}
		time.Sleep(time.Until(newest.Add(reapGrace + time.Second))) // the grace itself is what is tested
		out, _, err := runMain(t, rig.env, "admin", "reap")
		require.NoError(t, err, out)
		perThread, leaked, loose = census()
	}
	total := len(leaked)
	for _, n := range perThread {
		total += n
	}
	t.Logf("chaos: %d sandboxes, %d owned by live sessions, %d leaked; %d unmounted volumes", total, total-len(leaked), len(leaked), len(loose))
	require.Empty(t, leaked, "no sandbox outside a live session")
	require.Empty(t, loose, "no volume outside a sandbox")
	for thread, n := range perThread {
		require.Equal(t, 1, n, "thread %s has one sandbox", thread)
	}
	require.Len(t, perThread, len(owned), "every live session's sandbox exists")
}

// restartDockerd stops the Docker daemon (which stops every container) and starts it again the way
// make test's service script does.
func restartDockerd(t *testing.T) {
	t.Helper()
	out, err := exec.Command("pkill", "-TERM", "-x", "dockerd").CombinedOutput()
	require.NoError(t, err, "stopping dockerd: %s", out)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for exec.CommandContext(ctx, "pgrep", "-x", "dockerd").Run() == nil {
		select {
		case <-ctx.Done():
			t.Fatal("dockerd did not stop")
		case <-time.After(200 * time.Millisecond): // polling a process we do not own
		}
	}
	out, err = exec.CommandContext(ctx, "../../deploy/test-services.sh").CombinedOutput()
	require.NoError(t, err, "starting the services again: %s", out)
}

// chaosOnSandbox removes or stops a random sandbox of the deployment behind the bot's back.
func chaosOnSandbox(t *testing.T, prov *docker.Provider, dep string, rng *rand.Rand) {
	t.Helper()
	list, err := prov.List(t.Context(), map[string]string{sandbox.LabelDeployment: dep})
	require.NoError(t, err)
	if len(list) == 0 {
		return
	}
	h := list[rng.IntN(len(list))].Handle
	if rng.IntN(2) == 0 {
		_ = prov.Destroy(t.Context(), h) // docker rm -f
	} else {
		_ = prov.Stop(t.Context(), h) // docker stop
	}
}
