package agentpool

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	shellrt "github.com/threadbox/threadbox/agentpool/runtime/shell"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
)

// TestDaytonaCreateFaults: issue 13's create rules, through the pool. A create answered 429 is
// retried and the turn runs. A create that times out after it was sent, before Daytona acted on it,
// is not sent again (by the provider or the pool): the turn fails, and when Daytona makes the
// sandbox after all, the reaper finds it by the deployment label once the grace has passed and
// removes it. The thread's next turn gets a sandbox of its own.
func TestDaytonaCreateFaults(t *testing.T) {
	env := daytonaEnv(t)
	st := dbtest.OpenPostgres(t)
	dep := "pooltest-" + randomSuffix()
	prov, err := daytona.New(daytona.Options{
		APIURL: env.fake.APIURL(), APIKey: daytonafake.APIKey, Deployment: dep, StateTimeout: 2 * time.Minute,
		RequestTimeout: time.Second, Logger: zaptest.NewLogger(t),
	})
	require.NoError(t, err)
	t.Cleanup(func() { destroyDeployment(t, prov, dep) })
	f := newFixture(t, st, prov, shellrt.New(), func(c *Config) { c.Deployment = dep; c.Image = env.image })
	sink := newCollector()

	t.Run("429 is retried", func(t *testing.T) {
		calls := env.fake.Calls("createSandbox")
		env.fake.Inject(daytonafake.Fault{Op: "createSandbox", Status: http.StatusTooManyRequests, Times: 2})
		submit(t, f.pool, "web:busy", "busy-1", "echo made", sink)
		out := sink.wait(t, 1)[0]
		require.NoError(t, out.Err)
		require.Equal(t, "made", out.Answer)
		require.Equal(t, 3, env.fake.Calls("createSandbox")-calls, "two 429s, then the create")
		require.Len(t, deploymentSandboxes(t, prov, dep), 1)
	})

	t.Run("a lost create is found by the reaper", func(t *testing.T) {
		calls := env.fake.Calls("createSandbox")
		release := make(chan struct{})
		env.fake.Inject(daytonafake.Fault{Op: "createSandbox", Hang: true, Release: release})
		carried := env.fake.Await("createSandbox")
		submit(t, f.pool, "web:lost", "lost-1", "echo never", sink)
		out := sink.wait(t, 1)[0]
		require.ErrorContains(t, out.Err, "daytona create", "no answer to the create")
		require.NotErrorIs(t, out.Err, sandbox.ErrNoEffect)
		require.Equal(t, 1, env.fake.Calls("createSandbox")-calls, "the create was not sent again")
		require.Equal(t, db.SessionError, sessionStatus(t, st, "web:lost").Status)

		close(release) // Daytona gets to it after all
		<-carried
		var late sandbox.Info
		for _, info := range deploymentSandboxes(t, prov, dep) {
			if info.Labels[sandbox.LabelThread] == "web:lost" {
				late = info
			}
		}
		require.NotEmpty(t, late.Handle.ID, "the lost create made a sandbox for the thread")

		clock := dbtest.NewClock(time.Now().UTC())
		m := newTestMaintainer(t, MaintainerConfig{}, st, prov, dep, clock, nil)
		rep, err := m.ReapPass(t.Context(), false)
		require.NoError(t, err)
		require.Empty(t, rep.Orphans, "within the grace nothing is an orphan")
		clock.Advance(DefaultReapGrace + time.Minute)
		rep, err = m.ReapPass(t.Context(), false)
		require.NoError(t, err)
		require.Equal(t, []string{late.Handle.ID}, infoIDs(rep.Orphans), "the reaper finds what the lost create made, and only that")
		require.Equal(t, 1, rep.Destroyed)
		_, err = prov.Inspect(t.Context(), late.Handle)
		require.ErrorIs(t, err, sandbox.ErrNotFound)

		submit(t, f.pool, "web:lost", "lost-2", "echo second", sink)
		out = sink.wait(t, 1)[0]
		require.NoError(t, out.Err)
		require.Equal(t, "second", out.Answer)
		require.Len(t, deploymentSandboxes(t, prov, dep), 2, "web:busy's and web:lost's new one")
	})
}
