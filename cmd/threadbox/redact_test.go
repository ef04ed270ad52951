package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/cmd/threadbox/logging"
	"github.com/threadbox/threadbox/db"
)

// A session's last error is the provider's own text. Admin replies were redacted (chat and CLI), but
// the directory the web operations view and conversation API read gave it to them as recorded.
func TestDirectoryRedactsTheLastError(t *testing.T) {
	env := baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=local", "THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true",
		"THREADBOX_SANDBOX_LOCAL_DIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, env)
	require.NoError(t, m.ParseFlags([]string{"serve"}))
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	a, err := m.buildApp(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { a.shutdown(m.Logger, 5*time.Second) })

	const thread = "web:c1"
	_, _, err = a.store.SessionCreate(t.Context(), db.NewSession{ThreadKey: thread, Platform: "web", Provider: "local"})
	require.NoError(t, err)
	msg := "create: POST https://ops:hunter2pass@daytona.example/api: 401"
	_, err = a.store.SessionUpdate(t.Context(), thread, db.SessionPatch{LastError: &msg})
	require.NoError(t, err)
	want := "create: POST https://ops:" + logging.URLPassword + "@daytona.example/api: 401"

	list, _, err := a.dir.Sessions(t.Context(), "")
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, want, list[0].LastError, "the ops view's rows")
	one, found, err := a.dir.Session(t.Context(), bot.WebThread("c1"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, want, one.LastError, "a conversation's session")
	web, err := a.dir.PlatformSessions(t.Context(), "web", 10)
	require.NoError(t, err)
	require.Len(t, web, 1)
	require.Equal(t, want, web[0].LastError, "the conversation list")
}
