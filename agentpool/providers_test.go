package agentpool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestProviderSetRefusesDuplicates: two different providers under one name are refused; the default
// listed again is not.
func TestProviderSetRefusesDuplicates(t *testing.T) {
	a, b := sandboxfake.NewNamed("docker"), sandboxfake.NewNamed("docker")
	_, err := newProviderSet(a, []sandbox.Provider{b})
	require.ErrorContains(t, err, `two providers are named "docker"`)
	s, err := newProviderSet(a, []sandbox.Provider{a, sandboxfake.NewNamed("daytona")})
	require.NoError(t, err)
	require.Equal(t, []string{"docker", "daytona"}, s.names)
	// An empty column (rows from before the registry) and a provider no longer enabled mean the default.
	require.Equal(t, "docker", s.pick("").Name())
	require.Equal(t, "docker", s.pick("deno").Name())
	require.Equal(t, "daytona", s.pick("daytona").Name())
}

// TestMoveOffAProviderThatIsDown: a thread can leave a provider whose service is down. The move does
// not wait for it; the session records the choice, the next turn runs on the new provider, and the
// old sandbox, which nothing owns any more, is reaped once its provider answers again.
func TestMoveOffAProviderThatIsDown(t *testing.T) {
	forEachMaintStore(t, func(t *testing.T, st db.Store, clock *dbtest.Clock) {
		ctx := t.Context()
		local, cloud := sandboxfake.NewNamed("docker"), sandboxfake.NewNamed("cloud")
		cloud.SetClock(clock.Now)
		rt := &scriptRuntime{}
		p, err := New(Config{Deployment: "dep", Image: "img", ProviderWait: time.Hour},
			Deps{Store: st, Provider: local, Providers: []sandbox.Provider{cloud}, Runtime: rt, Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Shutdown(context.Background()) })

		_, err = p.UseProvider(ctx, WorkspaceThread{ThreadKey: "t", Platform: "test"}, "cloud")
		require.NoError(t, err)
		require.Equal(t, "echo: one", turn(t, p, "t", "e1", "one").Answer)
		require.Equal(t, 1, cloud.Len())
		old := sessionStatus(t, st, "t")

		// Down for the move's destroy and the next turn's retry of it.
		for range 2 {
			cloud.FailNext("Destroy", fmt.Errorf("cloud delete: %w: 503", sandbox.ErrUnavailable))
		}
		ch, err := p.UseProvider(ctx, WorkspaceThread{ThreadKey: "t", Platform: "test"}, "docker")
		require.ErrorIs(t, err, sandbox.ErrUnavailable, "the move says the old sandbox is not destroyed yet")
		require.True(t, ch.Moved)
		s := sessionStatus(t, st, "t")
		require.Equal(t, "docker", s.Provider, "the choice is recorded")
		require.Equal(t, db.SessionDestroying, s.Status)

		out := turn(t, p, "t", "e2", "two")
		require.Equal(t, "echo: two", out.Answer)
		require.Equal(t, RecreateMoved, out.Recreate)
		require.True(t, out.Replayed)
		require.Equal(t, 1, local.Len(), "the thread runs on the new provider")
		require.Equal(t, 1, cloud.Len(), "the old sandbox is still there")

		// The cloud comes back: its reaper removes what nothing owns.
		m, err := NewMaintainer(MaintainerConfig{}, MaintainerDeps{Store: st, Provider: local, Providers: []sandbox.Provider{cloud},
			Deployment: "dep", Logger: zaptest.NewLogger(t), Now: clock.Now})
		require.NoError(t, err)
		clock.Advance(DefaultReapGrace + time.Minute)
		rep, err := m.ReapPass(ctx, false)
		require.NoError(t, err)
		require.Equal(t, []string{"cloud/" + old.SandboxID}, orphanKeys(rep.Orphans))
		require.Equal(t, 0, cloud.Len())
		require.Equal(t, 1, local.Len(), "the thread's new sandbox is owned")
	})
}
