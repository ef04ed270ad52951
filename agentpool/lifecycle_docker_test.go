package agentpool

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
)

// startFails is a real provider whose Start fails a given number of times (an engine that cannot
// start the container: a broken mount, a full disk).
type startFails struct {
	sandbox.Provider
	left atomic.Int32
}

func (s *startFails) Start(ctx context.Context, h sandbox.Handle) error {
	if s.left.Add(-1) >= 0 {
		return errors.New("docker start: error mounting the work volume")
	}
	return s.Provider.Start(ctx, h)
}

// TestDockerStartFailingThreeTimesRecreatesWithHistory: the acceptance case on a real provider and
// PostgreSQL. A stopped sandbox whose start fails three times (max_resume_failures: 3) is destroyed
// by the next turn, which recreates it, replays the history and says why; the old sandbox (and on
// Docker its volume) is gone, and one sandbox is left.
func TestDockerStartFailingThreeTimesRecreatesWithHistory(t *testing.T) {
	forEachProvider(t, testStartFailing)
}

func testStartFailing(t *testing.T, env provEnv) {
	st := dbtest.OpenPostgres(t)
	f := newProvFixture(t, st, env)
	prov := &startFails{Provider: f.prov}
	pool := newFixture(t, st, prov, f.rt, func(c *Config) {
		c.Deployment, c.Image, c.MaxResumeFailures = f.deployment, f.pool.cfg.Image, 3
	}).pool
	sink := newCollector()
	submit(t, pool, "web:sf", "e0", "echo first", sink)
	require.NoError(t, sink.wait(t, 1)[0].Err)
	old := mustHandle(t, sessionStatus(t, st, "web:sf"))
	vr, hasVolumes := f.prov.(sandbox.VolumeReaper)
	var oldVol string
	if hasVolumes {
		oldVol = handleVolume(t, old)
	}

	require.NoError(t, f.prov.Stop(t.Context(), old))
	prov.left.Store(3)
	for i := range 3 {
		submit(t, pool, "web:sf", fmt.Sprint("f", i), "echo broken", sink)
		require.ErrorContains(t, sink.wait(t, 1)[0].Err, "error mounting the work volume")
	}
	require.Equal(t, 3, sessionStatus(t, st, "web:sf").ResumeFailCount)

	submit(t, pool, "web:sf", "e-last", "echo again", sink)
	out := sink.wait(t, 1)[0]
	require.NoError(t, out.Err)
	require.Equal(t, "again", out.Answer)
	require.Equal(t, RecreateResumeFailed, out.Recreate)
	require.Contains(t, f.rt.last().History, "User: echo first\nAssistant: first", "history replayed")
	s := sessionStatus(t, st, "web:sf")
	require.Equal(t, db.SessionActive, s.Status)
	require.Equal(t, int64(2), s.Generation)
	_, err := f.prov.Inspect(t.Context(), old)
	require.ErrorIs(t, err, sandbox.ErrNotFound, "the broken sandbox was destroyed")
	if hasVolumes {
		vols, err := vr.ListVolumes(t.Context(), map[string]string{sandbox.LabelDeployment: f.deployment})
		require.NoError(t, err)
		require.Len(t, vols, 1)
		require.NotEqual(t, oldVol, vols[0].Name, "and its volume with it")
	}
	require.Len(t, f.sandboxes(t), 1)
}
