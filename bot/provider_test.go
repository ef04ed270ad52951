package bot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestUseProviderReplies runs "use", "status" and "admin move" through the handler and a real pool
// with two providers enabled (docker the default, daytona), on SQLite: each reply says what happened.
func TestUseProviderReplies(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	dock, day := sandboxfake.NewNamed("docker"), sandboxfake.NewNamed("daytona")
	pool, err := agentpool.New(agentpool.Config{Deployment: "use", Image: "img"},
		agentpool.Deps{Store: st, Provider: dock, Providers: []sandbox.Provider{day}, Runtime: minimalRuntime{}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })
	admin := NewAdmin(st, agentpool.Ops{Pool: pool}, []string{"slack:ADMIN"}, nil)
	h := NewHandler(HandlerConfig{ProgressInterval: time.Millisecond}, pool, st, admin, nil)
	thread := SlackThread("T", "C", "1.1")
	said := 0
	sayIn := func(thread ThreadKey, user, text, want string) string {
		t.Helper()
		r := newChatReplier()
		// Each message an event of its own, as the platform gives them: the same command said twice
		// ("use docker") is two events, not a retry of one, which the handler would drop as seen.
		said++
		require.NoError(t, h.Handle(t.Context(), Message{Thread: thread, ChannelID: "C", User: User{ID: user}, Text: text,
			EventID: fmt.Sprintf("%s%s-%d", text, user, said)}, r))
		return r.waitPost(t, want)
	}
	say := func(user, text, want string) string { t.Helper(); return sayIn(thread, user, text, want) }
	// Admin commands run on the queue of the thread they are written in; one naming that very thread
	// must not wait behind itself.
	adminThread := SlackThread("T", "C", "9.9")

	require.Equal(t, `Write "use <provider>" to pick where this thread's sandbox runs. Enabled providers: docker (default), daytona.`,
		say("U", "use", "Enabled providers"))
	require.Equal(t, `There is no sandbox provider "deno" here. Enabled providers: docker (default), daytona.`,
		say("U", "use deno", "no sandbox provider"))
	require.Contains(t, say("U", "status", "No sandbox yet"),
		"\nThis thread runs on docker. Enabled providers: docker (default), daytona. Switch with \"use <provider>\".")

	// Before the first turn: the choice only.
	require.Equal(t, "This thread will run on daytona.", say("U", "Use Daytona", "daytona"))
	require.Contains(t, say("U", "status", "Sandbox:"), "\nThis thread runs on daytona.")
	say("U", "build it", "echo: build it")
	s, err := st.SessionGet(t.Context(), thread.String())
	require.NoError(t, err)
	require.Equal(t, "daytona", s.Provider)
	require.Equal(t, 1, day.Len())
	require.Contains(t, say("U", "status", "Sandbox: active"), "(daytona ")

	// Later: a move, said so.
	require.Equal(t, "Moved this thread from daytona to docker: its sandbox on daytona was destroyed (with any files in it), "+
		"and the next message starts a new one on docker with the conversation so far replayed.", say("U", "use docker", "Moved"))
	require.Equal(t, 0, day.Len(), "the daytona sandbox is destroyed")
	require.Equal(t, "This thread already runs on docker.", say("U", "use docker", "already"))

	// Admin move: admins only, audited.
	key := thread.String()
	require.Contains(t, sayIn(adminThread, "U", "admin move "+key+" daytona", "Sorry"), "admin.users")
	require.Equal(t, key+": This thread now runs on daytona: the next message starts a sandbox there with the conversation so far replayed.",
		say("ADMIN", "admin move "+key+" daytona", "now runs on daytona"))
	require.Contains(t, sayIn(adminThread, "ADMIN", "admin move "+key+" kvm", "move failed"), `no sandbox provider "kvm" here; enabled: docker, daytona`)
	entries, err := st.AuditList(t.Context(), db.AuditQuery{})
	require.NoError(t, err)
	var moves []string
	for _, e := range entries {
		if e.Action == "admin move" {
			moves = append(moves, e.Actor+" "+e.Target+" "+e.Result)
		}
	}
	require.Equal(t, []string{
		"slack:ADMIN " + key + " kvm error: invalid", "slack:ADMIN " + key + " kvm started",
		"slack:ADMIN " + key + " daytona ok", "slack:ADMIN " + key + " daytona started",
		"slack:U " + key + " daytona denied",
	}, moves)
	say("U", "build more", "echo: build more")
	require.Equal(t, 1, day.Len(), "the next turn ran on daytona")
	require.NoError(t, h.Wait(t.Context()))
}
