package bot

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
)

// sessionReadStore records the thread keys sessions were read for.
type sessionReadStore struct {
	db.Store
	read []string
}

func (s *sessionReadStore) SessionGet(ctx context.Context, k string) (db.Session, error) {
	s.read = append(s.read, k)
	return s.Store.SessionGet(ctx, k)
}

// movingOps is recordingOps that can move threads between providers.
type movingOps struct{ recordingOps }

func (o *movingOps) MoveProvider(ctx context.Context, k, name string) (agentpool.ProviderChange, error) {
	return agentpool.ProviderChange{}, o.act(ctx, "move "+k+" "+name)
}

// TestAdminRefusesMalformedThreadKeys: the web API checked a thread key with ParseThreadKey, chat and
// CLI passed any text on to the store and the pool. A malformed key is refused, saying what a key
// looks like, before anything reads or acts on it; the attempt is still audited.
func TestAdminRefusesMalformedThreadKeys(t *testing.T) {
	for _, argv := range [][]string{
		{"inspect", "nope"}, {"pause", "slack:T:C"}, {"resume", "web:"}, {"destroy", "web:a:b"},
		{"move", "slack::C:1", "docker"}, {"stats", "discord:G"}, {"logs", "x", "10"}, {"attach", "slack:T:C:1:2"},
	} {
		t.Run(argv[0], func(t *testing.T) {
			st := &sessionReadStore{Store: dbtest.OpenSQLite(t)}
			ops := &movingOps{recordingOps{store: st}}
			out, err := NewAdmin(st, ops, []string{"slack:UADMIN"}, nil).Run(t.Context(), "slack:UADMIN", argv)
			require.Error(t, err)
			require.Contains(t, out, "thread key", out)
			require.Contains(t, out, "want slack:<team>:<channel>:<ts>", out)
			require.Empty(t, ops.ran, "nothing acted")
			require.Empty(t, st.read, "nothing read")
			entries, err := st.AuditList(t.Context(), db.AuditQuery{})
			require.NoError(t, err)
			require.Len(t, entries, 2, "started and its outcome")
			require.Equal(t, strings.Join(argv[1:], " "), entries[1].Target)
			require.Contains(t, entries[0].Result, "error")
		})
	}
}

// TestAdminTakesWellFormedThreadKeys: every form ParseThreadKey knows still reaches the action.
func TestAdminTakesWellFormedThreadKeys(t *testing.T) {
	for _, key := range []string{"slack:T:C:1.1", "slack:T:dm:U1", "discord:G:123", "discord:dm:U1", "web:c1"} {
		st := dbtest.OpenSQLite(t)
		ops := &recordingOps{store: st}
		out, err := NewAdmin(st, ops, []string{"slack:UADMIN"}, nil).Run(t.Context(), "slack:UADMIN", []string{"pause", key})
		require.NoError(t, err, out)
		require.Equal(t, []string{"pause " + key}, ops.ran)
	}
}
