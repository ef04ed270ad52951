package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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
	if os.Getenv("THREADBOX_CHAOS") == "full" {
		threads, turns, kills = 20, 200, 4
	}
	prov := dockertest.New(t, docker.Options{})
	bin := buildBinary(t)
	const reapGrace = time.Minute
	dbPath := filepath.Join(t.TempDir(), "tb.db")
	rig := newCrashRig(t, "sqlite:"+dbPath)
	rig.env = append(rig.env, "THREADBOX_LIFECYCLE_REAP_GRACE="+reapGrace.String())
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
			kill(t, s)
			s = startServer(t, bin, rig.env)
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
	census := func() (perThread map[string]int, leaked []sandbox.Info) {
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
		return perThread, leaked
	}
	perThread, leaked := census()
	if len(leaked) > 0 {
		// A kill in the middle of a create leaves a container no session records: the reaper's case.
		// It removes such a sandbox once it is older than reap_grace, so that much time must pass.
		t.Logf("chaos: %d unattributed sandboxes (a kill during a create); running the reaper after the grace", len(leaked))
		require.NoError(t, st.Close())
		var newest time.Time
		for _, info := range leaked {
			if info.CreatedAt.After(newest) {
				newest = info.CreatedAt
			}
		}
		time.Sleep(time.Until(newest.Add(reapGrace + time.Second))) // the grace itself is what is tested
		out, _, err := runMain(t, rig.env, "admin", "reap")
		require.NoError(t, err, out)
		perThread, leaked = census()
	}
	total := len(leaked)
	for _, n := range perThread {
		total += n
	}
	t.Logf("chaos: %d sandboxes, %d owned by live sessions, %d leaked", total, total-len(leaked), len(leaked))
	require.Empty(t, leaked, "no sandbox outside a live session")
	for thread, n := range perThread {
		require.Equal(t, 1, n, "thread %s has one sandbox", thread)
	}
	require.Len(t, perThread, len(owned), "every live session's sandbox exists")
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
