package main

import (
	"context"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// leadingLine is what the maintainer logs when it takes the leader lease.
const leadingLine = "leading: maintenance loops started"

// leaderGauge reads threadbox_leader from a replica's /metrics (loopback, no token configured).
func leaderGauge(t *testing.T, s *server) float64 {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return metricValue(t, string(body), "threadbox_leader")
}

// waitDone waits for the ✅ that ends a turn's answer.
func waitDone(t *testing.T, rig *crashRig, ev slackfake.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, rig.fake.Wait(ctx, func() bool {
		return countOf(rig.fake.Reactions(ev.Channel, ev.TS), "white_check_mark") > 0
	}), "answered: %s", rig.thread(ev))
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// TestTwoReplicasOneLeaderTakeoverAndNoDoubleAnswers runs two real `threadbox serve` processes on one
// PostgreSQL and one Redis. One leads the loops (its log and its threadbox_leader say so, the other's
// do not); after it is SIGKILLed the other takes over within a few loop intervals; events sent to
// either are answered, and the same event delivered to both is answered once.
func TestTwoReplicasOneLeaderTakeoverAndNoDoubleAnswers(t *testing.T) {
	requireServices(t)
	bin := buildBinary(t)
	pg := dbtest.PostgresSchemaURL(t)
	rig := newCrashRig(t, pg)
	rig.env = append(rig.env, "THREADBOX_REDIS_URL="+envOr("THREADBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
	const interval = time.Second // THREADBOX_LIFECYCLE_LOOP_INTERVAL in the rig

	a := startServer(t, bin, rig.env)
	require.True(t, a.waitLog(leadingLine, time.Minute), "the first replica leads: %s", a.logText())
	b := startServer(t, bin, rig.env)
	// b asks for the lease at start and every interval after; a holds it, so b never leads.
	require.False(t, b.waitLog(leadingLine, 3*interval), "one leader at a time")
	require.Equal(t, 1.0, leaderGauge(t, a))
	require.Equal(t, 0.0, leaderGauge(t, b))

	// Events sent to either replica are answered.
	toA := rig.fake.Mention("C1", "U1", "echo via-a")
	rig.deliver(t, a, toA)
	toB := rig.fake.Mention("C2", "U1", "echo via-b")
	rig.deliver(t, b, toB)
	rig.waitThread(t, toA, "A answers", "via-a")
	rig.waitThread(t, toB, "B answers", "via-b")

	// The same event delivered to both at once (Slack retrying to another replica) is answered once.
	twice := rig.fake.Mention("C3", "U1", "echo answered-once")
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	errs := make([]error, 2)
	for i, s := range []*server{a, b} {
		wg.Go(func() {
			res, err := rig.fake.Deliver(context.Background(), s.url+"/slack/events", twice)
			statuses[i], errs[i] = res.Status, err
		})
	}
	wg.Wait()
	// One takes it (200). The other acknowledges it as a duplicate (200), or, if it came while the
	// first was still taking it (its dedupe mark pending), answers 503 so that Slack asks again
	// later: a 200 then would be an ack of a message that may yet fail to be recorded.
	acked := 0
	for i := range errs {
		require.NoError(t, errs[i])
		require.Contains(t, []int{200, 503}, statuses[i], "replica %d", i)
		if statuses[i] == 200 {
			acked++
		}
	}
	require.Positive(t, acked, "one replica acknowledges it")
	waitDone(t, rig, twice)
	for i, s := range []*server{a, b} {
		if statuses[i] == 503 { // Slack's next retry, once the first delivery is taken: a duplicate
			res, err := rig.fake.Deliver(context.Background(), s.url+"/slack/events", twice, slackfake.Retry(1, "http_error"))
			require.NoError(t, err)
			require.Equal(t, 200, res.Status, "the retry is acknowledged as a duplicate")
		}
	}
	// Both acks are in: whichever replica took the event recorded its turn before acknowledging, and
	// the other deduplicated it before acknowledging, so no second turn can appear after this point.
	st, err := db.Open(context.Background(), pg)
	require.NoError(t, err)
	defer st.Close()
	key := "slack:" + rig.fake.Options().TeamID + ":C3:" + twice.TS
	turns, err := st.TurnTranscript(t.Context(), key, db.TranscriptLimit{MaxTurns: 100, MaxChars: 1 << 20})
	require.NoError(t, err)
	require.Len(t, turns, 1, "one turn for the event delivered twice (%s)", key)
	require.Equal(t, 1, countOf(rig.fake.Reactions("C3", twice.TS), "white_check_mark"), "one answer marked done")

	// Kill the leader: the other takes over within a few intervals (the lease is a PostgreSQL
	// session lock, freed when the dead process's connection closes).
	killed := time.Now()
	kill(t, a)
	require.True(t, b.waitLog(leadingLine, 15*interval), "B takes over: %s", b.logText())
	took := time.Since(killed)
	t.Logf("takeover after %s", took)
	require.Less(t, took, 5*interval, "within a few loop intervals")
	require.Equal(t, 1.0, leaderGauge(t, b))

	// And B alone answers what is sent to it.
	after := rig.fake.Mention("C4", "U1", "echo after-takeover")
	rig.deliver(t, b, after)
	rig.waitThread(t, after, "B answers after the takeover", "after-takeover")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-b.done)
}
