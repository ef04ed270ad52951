package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/db"
)

// fakeSessions serves SessionsByStatus from a slice.
type fakeSessions []db.Session

func (f fakeSessions) SessionsByStatus(_ context.Context, st db.SessionStatus, after string, limit int) ([]db.Session, error) {
	var out []db.Session
	for _, s := range f {
		if s.Status == st && s.ThreadKey > after && len(out) < limit {
			out = append(out, s)
		}
	}
	return out, nil
}

// exercise touches every instrument once, so every series exists for the linter.
func exercise(m *Metrics) {
	m.TurnQueued(1)
	m.TurnQueued(-1)
	m.TurnStarted(time.Millisecond)
	m.TurnFinished(agentpool.TurnOutcomeDone, time.Second)
	for _, o := range []string{agentpool.ResolveCreate, agentpool.ResolveReuse, agentpool.ResolveRecreate} {
		m.Resolve("docker", o, 10*time.Millisecond)
	}
	for _, k := range []string{agentpool.RetryPrompt, agentpool.RetryHealth, agentpool.RetryRuntimeRestart} {
		m.Retry("docker", k)
	}
	m.Pass("reaper", agentpool.PassReport{Found: 2, Done: 1, Failed: 1}, time.Millisecond, nil)
	m.Leading(true)
	m.Sandboxes("docker", 3, 1)
	for _, k := range []string{bot.ChatReceived, bot.ChatDeduped, bot.ChatAck, bot.ChatRefusedSignature,
		bot.ChatRefusedRateLimit, bot.ChatRefusedAccess} {
		m.ChatEvent("slack", k)
	}
	m.Upload("slack", bot.UploadOK)
}

func TestMetricNamesPassTheLinter(t *testing.T) {
	m := New(fakeSessions{{ThreadKey: "a", Status: db.SessionActive, Provider: "docker"}}, nil)
	exercise(m)
	problems, err := testutil.GatherAndLint(m.Registry())
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestInstrumentsRecord(t *testing.T) {
	m := New(nil, nil)
	exercise(m)
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"turns started", testutil.ToFloat64(m.turnsStarted), 1},
		{"turns in flight back to zero", testutil.ToFloat64(m.turnsInFlight), 0},
		{"turns queued back to zero", testutil.ToFloat64(m.turnsQueued), 0},
		{"turns done", testutil.ToFloat64(m.turnsFinished.WithLabelValues("done")), 1},
		{"recreates", testutil.ToFloat64(m.resolves.WithLabelValues("docker", "recreate")), 1},
		{"prompt retries", testutil.ToFloat64(m.promptRetries.WithLabelValues("docker")), 1},
		{"health retries", testutil.ToFloat64(m.healthRetries.WithLabelValues("docker")), 1},
		{"runtime restarts", testutil.ToFloat64(m.restarts.WithLabelValues("docker")), 1},
		{"reaper found", testutil.ToFloat64(m.passItems.WithLabelValues("reaper", "found")), 2},
		{"leader", testutil.ToFloat64(m.leader), 1},
		{"unowned sandboxes", testutil.ToFloat64(m.sandboxesOrph.WithLabelValues("docker")), 1},
		{"signature refusals", testutil.ToFloat64(m.chatRefused.WithLabelValues("slack", "signature")), 1},
		{"access refusals", testutil.ToFloat64(m.chatRefused.WithLabelValues("slack", "access")), 1},
		{"uploads", testutil.ToFloat64(m.chatUploads.WithLabelValues("slack", "ok")), 1},
	} {
		require.Equal(t, tc.want, tc.got, tc.name)
	}
}

func TestSessionsAreCountedByStatusAndProvider(t *testing.T) {
	m := New(fakeSessions{
		{ThreadKey: "a", Status: db.SessionActive, Provider: "docker"},
		{ThreadKey: "b", Status: db.SessionActive, Provider: "docker"},
		{ThreadKey: "c", Status: db.SessionPaused, Provider: "docker"},
		{ThreadKey: "d", Status: db.SessionDestroyed, Provider: "docker"},
	}, nil)
	want := `
# HELP threadbox_sessions Sessions by status and provider, read from the database at scrape time (destroyed ones not counted; at most 10000 per status).
# TYPE threadbox_sessions gauge
threadbox_sessions{provider="docker",status="active"} 2
threadbox_sessions{provider="docker",status="paused"} 1
`
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "threadbox_sessions"))
}

// TestSandboxGaugesLeaveWithTheLeadership: a replica that lost the leader's lease kept the sandbox
// counts of its last reaper pass forever, so `max by (provider)` (the dashboard, the
// ThreadboxUnownedSandboxes alert) showed orphans the new leader had long reaped. They now go with the
// lease: only the leader reports them.
func TestSandboxGaugesLeaveWithTheLeadership(t *testing.T) {
	m := New(nil, nil)
	m.Leading(true)
	m.Sandboxes("docker", 3, 2)
	require.Equal(t, 2.0, testutil.ToFloat64(m.sandboxesOrph.WithLabelValues("docker")))
	m.Leading(false)
	require.Zero(t, testutil.CollectAndCount(m.sandboxesOrph), "the former leader reports no unowned sandboxes")
	require.Zero(t, testutil.CollectAndCount(m.sandboxesLive), "nor live ones")
}
