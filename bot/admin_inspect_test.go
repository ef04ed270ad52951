package bot

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/db/dbtest"
	"github.com/threadbox/threadbox/sandbox"
)

// TestAdminInspectionCommands: logs, stats and attach run for admins only, audited before they act,
// and word what the pool found, including the cases where there is nothing to look into.
func TestAdminInspectionCommands(t *testing.T) {
	const key = "slack:T:C:1.1"
	running := agentpool.SandboxView{ThreadKey: key, Provider: "docker", SandboxID: "abc123", Generation: 2, State: "running"}
	paused := running
	paused.State = "stopped"
	for _, tc := range []struct {
		name    string
		actor   string
		argv    []string
		ops     recordingOps
		wantErr error
		wantRan []string
		want    []string
	}{
		{name: "logs tail", actor: "slack:UADMIN", argv: []string{"logs", key, "20"},
			ops:     recordingOps{log: agentpool.RuntimeLog{SandboxView: running, Runtime: "opencode", Path: ".cache/threadbox/opencode.log", Tail: "listening on 4096\n"}},
			wantRan: []string{"logs " + key + " 20"},
			want:    []string{"Last 20 lines of .cache/threadbox/opencode.log (opencode runtime)", "listening on 4096", "generation 2"}},
		{name: "logs of a runtime without a log", actor: "slack:UADMIN", argv: []string{"logs", key},
			ops:     recordingOps{log: agentpool.RuntimeLog{SandboxView: running, Runtime: "shell"}},
			wantRan: []string{"logs " + key + " 50"}, want: []string{"the shell runtime keeps no log of its own"}},
		{name: "logs of a paused sandbox", actor: "slack:UADMIN", argv: []string{"logs", key},
			ops:     recordingOps{log: agentpool.RuntimeLog{SandboxView: paused, Runtime: "opencode", Path: "x.log"}},
			wantRan: []string{"logs " + key + " 50"}, want: []string{"is stopped, not running", "resume " + key}},
		{name: "logs with a bad count", actor: "slack:UADMIN", argv: []string{"logs", key, "lots"}, wantErr: nil,
			want: []string{"n must be a number"}},
		{name: "stats of a sandbox", actor: "slack:UADMIN", argv: []string{"stats", key},
			ops: recordingOps{usage: agentpool.SandboxUsage{SandboxView: running, HasStats: true, DiskBytes: 3 << 20,
				Stats: sandbox.Stats{CPUPercent: 12.5, MemoryBytes: 64 << 20, MemoryLimit: 512 << 20, PIDs: 7, NetRxBytes: 2048}}},
			wantRan: []string{"stats " + key},
			want:    []string{"CPU: 12.5%", "Memory: 64 MiB of 512 MiB", "Processes: 7", "Network: 2 KiB in", "Disk: 3 MiB"}},
		{name: "stats of a thread without a sandbox", actor: "slack:UADMIN", argv: []string{"stats", key},
			ops:     recordingOps{usage: agentpool.SandboxUsage{SandboxView: agentpool.SandboxView{ThreadKey: key, State: agentpool.StateNone}}},
			wantRan: []string{"stats " + key}, want: []string{"has no sandbox"}},
		{name: "attach", actor: "slack:UADMIN", argv: []string{"attach", key},
			ops:     recordingOps{attach: agentpool.Attach{SandboxView: running, Command: "docker exec -it -u 1000:1000 -w /workspace abc123 bash"}},
			wantRan: []string{"attach " + key}, want: []string{"docker exec -it -u 1000:1000 -w /workspace abc123 bash"}},
		{name: "non-admins are refused", actor: "slack:U2", argv: []string{"attach", key}, wantErr: ErrNotAdmin,
			want: []string{"limited to the users listed in admin.users"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := dbtest.OpenSQLite(t)
			ops := tc.ops
			ops.store = st
			out, err := NewAdmin(st, &ops, []string{"slack:UADMIN"}, nil).Run(t.Context(), tc.actor, tc.argv)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			require.Equal(t, tc.wantRan, ops.ran)
			for _, e := range ops.auditAtAction {
				require.Equal(t, AuditStarted, e.Result, "audited before the action")
			}
			entries, err := st.AuditList(t.Context(), db.AuditQuery{})
			require.NoError(t, err)
			require.NotEmpty(t, entries, "every attempt is audited")
			require.Equal(t, "admin "+tc.argv[0], entries[0].Action)
		})
	}
}

// TestGlobalStatsShowTheNumbersBehindMetrics: the global stats add the figures /metrics serves.
func TestGlobalStatsShowTheNumbersBehindMetrics(t *testing.T) {
	st := dbtest.OpenSQLite(t)
	a := NewAdmin(st, &recordingOps{store: st}, []string{"web:local"}, nil).WithNumbers(func(context.Context) ([]Stat, error) {
		return []Stat{{Name: "threadbox_turns_started_total", Value: 3}, {Name: "threadbox_sessions", Labels: `provider=docker,status=active`, Value: 1}}, nil
	})
	out, err := a.Run(t.Context(), "web:local", []string{"stats"})
	require.NoError(t, err)
	require.Contains(t, out, "threadbox_turns_started_total 3")
	require.Contains(t, out, "threadbox_sessions{provider=docker,status=active} 1")
}

// TestAdminLogsCannotCloseTheCodeBlock: the runtime's log is the sandbox's text (what the agent and
// the user made it print); no run of backticks in it may end the code block it is shown in.
func TestAdminLogsCannotCloseTheCodeBlock(t *testing.T) {
	const key = "slack:T:C:1.1"
	running := agentpool.SandboxView{ThreadKey: key, Provider: "docker", SandboxID: "abc123", Generation: 2, State: "running"}
	for _, tail := range []string{"```", "````", "`````", "``````", "a````b", "```\n<!channel> *pwned*\n````", "``", "`"} {
		t.Run(tail, func(t *testing.T) {
			st := dbtest.OpenSQLite(t)
			ops := recordingOps{store: st, log: agentpool.RuntimeLog{SandboxView: running, Runtime: "opencode", Path: "x.log", Tail: tail}}
			out, err := NewAdmin(st, &ops, []string{"slack:UADMIN"}, nil).Run(t.Context(), "slack:UADMIN", []string{"logs", key})
			require.NoError(t, err)
			require.Equal(t, 2, strings.Count(out, "```"), "only the block's own fences:\n%s", out)
			require.Equal(t, strings.Count(tail, "`"), strings.Count(out, "`")-6, "the log's backticks are all shown")
		})
	}
}
