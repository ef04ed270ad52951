package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/bot/slack/slackfake"
	"github.com/threadbox/threadbox/db"
)

// ephemeral waits for the asker's private reply in root's thread that contains want.
func (o *opsRig) ephemeral(t *testing.T, root slackfake.Event, user, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var got string
	require.NoError(t, o.fake.Wait(ctx, func() bool {
		for _, e := range o.fake.Ephemerals(root.Channel) {
			if e.ThreadTS == root.TS && e.User == user && strings.Contains(e.Text, want) {
				got = e.Text
				return true
			}
		}
		return false
	}), "a private reply to %s containing %q; got %+v", user, want, o.fake.Ephemerals(root.Channel))
	return got
}

// opsView runs an admin command through the web ops view's API, from loopback (web:local).
func (o *opsRig) opsView(t *testing.T, cmd string, body map[string]any) (int, string) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post("http://"+o.sv.addr+"/api/admin/"+cmd, "application/json", bytes.NewReader(raw))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Output, Error string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out.Output + out.Error
}

// TestOpsAdminLogsStatsAttach: for a Docker thread, logs, stats and attach work from Slack (admin
// replies are private), from the CLI and from the ops view; a non-admin is refused; every attempt is
// audited. The attach command, run as printed (without a terminal), lands as the sandbox's user in
// its working directory.
func TestOpsAdminLogsStatsAttach(t *testing.T) {
	requireServices(t)
	o := newOpsRig(t)
	root := o.fake.Mention("C1", "U1", "echo hi")
	o.deliver(t, root)
	o.waitReaction(t, root, "white_check_mark")
	thread := "slack:" + o.fake.Options().TeamID + ":C1:" + root.TS
	sbID := o.sandboxID(t, thread)

	type check struct{ argv, want []string }
	checks := []check{
		{[]string{"stats", thread}, []string{"CPU:", "Memory:", "Processes:", "Network:", "Disk:", sbID}},
		{[]string{"attach", thread}, []string{"docker exec -it -u 1000:1000 -w /workspace " + sbID + " sh"}},
		{[]string{"logs", thread, "5"}, []string{"the shell runtime keeps no log of its own"}},
		{[]string{"stats"}, []string{"threadbox_turns_started_total", "threadbox_sessions{provider=docker,status=active} 1"}},
	}
	// Slack: "@bot admin …" in the thread, answered privately.
	var attachCmd string
	for _, c := range checks {
		o.deliver(t, o.fake.Mention("C1", "UADMIN", "admin "+strings.Join(c.argv, " "), slackfake.InThread(root.TS)))
		for _, w := range c.want {
			got := o.ephemeral(t, root, "UADMIN", w)
			if c.argv[0] == "attach" {
				attachCmd = got
			}
		}
	}
	o.deliver(t, o.fake.Mention("C1", "U2", "admin attach "+thread, slackfake.InThread(root.TS)))
	o.ephemeral(t, root, "U2", "limited to the users listed in admin.users")

	// The ops view.
	for _, c := range checks {
		body := map[string]any{}
		if len(c.argv) > 1 {
			body["thread"] = c.argv[1]
		}
		if len(c.argv) > 2 {
			body["lines"] = 5
		}
		code, out := o.opsView(t, c.argv[0], body)
		require.Equal(t, http.StatusOK, code, out)
		for _, w := range c.want {
			require.Contains(t, out, w, "ops view %v", c.argv)
		}
	}

	// The CLI: its own process on the same PostgreSQL and Docker engine. Its counters are its own,
	// so the global stats check only the sessions read from the database.
	for _, c := range checks {
		out, _, err := runMain(t, o.env, append([]string{"admin"}, c.argv...)...)
		require.NoError(t, err, out)
		for _, w := range c.want {
			if c.argv[0] == "stats" && len(c.argv) == 1 && strings.HasPrefix(w, "threadbox_turns") {
				continue
			}
			require.Contains(t, out, w, "CLI %v", c.argv)
		}
	}

	// The printed command works as printed (minus the terminal, which a test has not got).
	line := ""
	for _, l := range strings.Split(attachCmd, "\n") {
		if strings.HasPrefix(l, "docker exec") {
			line = l
		}
	}
	argv := strings.Fields(strings.Replace(line, "exec -it", "exec -i", 1))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader("echo $(id -u) $(pwd)\n")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "1000 /workspace", strings.TrimSpace(string(out)))

	// Every attempt is audited: started before the action, the refusal as denied.
	o.stop(t)
	var pg string
	for _, e := range o.env {
		if v, ok := strings.CutPrefix(e, "THREADBOX_DATABASE_URL="); ok {
			pg = v
		}
	}
	st, err := db.Open(context.Background(), pg)
	require.NoError(t, err)
	defer st.Close()
	entries, err := st.AuditList(t.Context(), db.AuditQuery{Limit: 500})
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, e := range entries {
		seen[strings.SplitN(e.Actor, ":", 2)[0]+" "+e.Action+" "+e.Result] = true
	}
	for _, want := range []string{"slack admin attach started", "slack admin attach ok", "slack admin attach denied",
		"web admin logs started", "cli admin stats started", "cli admin attach ok"} {
		require.True(t, seen[want], "audit has %q; it has %v", want, seen)
	}
}
