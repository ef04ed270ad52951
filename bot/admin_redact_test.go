package bot

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// A session's last error is the provider's own text, and provider errors quote URLs and keys (a
// Daytona api_url with credentials, "invalid API key dtn_…"). The log redacts them; admin replies,
// which go to a chat, used to carry them as recorded.
func TestAdminRepliesAreRedacted(t *testing.T) {
	const key = "dtn_0123456789abcdef"
	st := dbtest.OpenSQLite(t)
	_, _, err := st.SessionCreate(t.Context(), db.NewSession{ThreadKey: "slack:T:C:1", Platform: "slack", Provider: "daytona"})
	require.NoError(t, err)
	msg := "create: POST https://ops:hunter2pass@daytona.example/api: 401 invalid API key " + key
	_, err = st.SessionUpdate(t.Context(), "slack:T:C:1", db.SessionPatch{LastError: &msg})
	require.NoError(t, err)
	a := NewAdmin(st, &recordingOps{store: st}, []string{"slack:UADMIN"}, nil).
		WithRedaction(func(s string) string {
			return strings.ReplaceAll(strings.ReplaceAll(s, key, "[REDACTED]"), "hunter2pass", "xxxxx")
		})
	out, err := a.Run(t.Context(), "slack:UADMIN", []string{"inspect", "slack:T:C:1"})
	require.NoError(t, err, out)
	require.Contains(t, out, "401 invalid API key [REDACTED]", "the error is still shown")
	require.NotContains(t, out, key)
	require.NotContains(t, out, "hunter2pass")
}
