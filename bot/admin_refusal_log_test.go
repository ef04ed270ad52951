package bot

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/threadbox/threadbox/db/dbtest"
)

// TestAdminRefusalLogIsBounded: anyone may send "admin <a platform's longest message>". The audit
// entry keeps at most maxAuditText runes of it; the log line of the refusal kept all of it.
func TestAdminRefusalLogIsBounded(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	log, logs := observed(zapcore.DebugLevel)
	a := NewAdmin(st, &recordingOps{store: st}, []string{"slack:UADMIN"}, log)
	word := strings.Repeat("é", 40_000)
	_, err := a.Run(t.Context(), "slack:U2", []string{word, strings.Repeat("x", 40_000)})
	require.ErrorIs(t, err, ErrNotAdmin)
	refused := logs.FilterMessage("admin command refused").All()
	require.Len(t, refused, 1)
	for _, f := range refused[0].Context {
		if f.Type == zapcore.StringType {
			require.LessOrEqual(t, utf8.RuneCountInString(f.String), maxAuditText, f.Key)
		}
	}
	require.Equal(t, strings.Repeat("é", maxAuditText-1)+"…", refused[0].ContextMap()["command"])
}
