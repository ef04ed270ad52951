package proctree

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/local"
)

// localSandbox is a sandbox on the local provider: its processes are the host's, which is what a
// kill round must tell apart.
func localSandbox(t *testing.T) (sandbox.Sandbox, string) {
	t.Helper()
	p, err := local.New(local.Options{Dir: t.TempDir(), IUnderstandNoIsolation: true})
	require.NoError(t, err)
	h, err := p.Create(t.Context(), sandbox.Spec{Image: "host", Labels: sandbox.Labels{Deployment: "proctree", Thread: "t"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), h) })
	var wd strings.Builder
	_, err = sandbox.Bind(p, h).Exec(t.Context(), sandbox.ExecRequest{Cmd: []string{"pwd"}, Stdout: &wd})
	require.NoError(t, err)
	return sandbox.Bind(p, h), strings.TrimSpace(wd.String())
}

// start runs script in the background in sb with env, and returns the pids it prints on its first
// line (its own first).
func start(t *testing.T, sb sandbox.Sandbox, env map[string]string, script string) []string {
	t.Helper()
	var out strings.Builder
	_, err := sb.Exec(t.Context(), sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}, Env: env, Stdout: &out})
	require.NoError(t, err)
	pids := strings.Fields(out.String())
	require.NotEmpty(t, pids, "the script prints its pids")
	t.Cleanup(func() {
		for _, p := range pids {
			_, _ = sb.Exec(context.Background(), sandbox.ExecRequest{Cmd: []string{"kill", "-9", p}})
		}
	})
	return pids
}

// startTime is field 22 of /proc/PID/stat.
func startTime(t *testing.T, pid string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	require.NoError(t, err)
	return strings.Fields(string(b)[strings.LastIndex(string(b), ")")+1:])[19]
}

func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	return len(f) > 0 && f[0] != "Z"
}

// TestKillTakesTheSeedsAndTheirDescendantsOnly: each kind of seed kills its processes and their
// descendants (one of which cleared its environment), and leaves alone a process of the same shape
// that the seeds do not name.
func TestKillTakesTheSeedsAndTheirDescendantsOnly(t *testing.T) {
	sb, wd := localSandbox(t)
	tag := rand.Text()
	// A tagged shell with a child that dropped the tag; it prints both pids, and detaches.
	tree := `sh -c 'sleep 300 & env -i sleep 300 & echo $$ $!; wait' </dev/null >pids 2>/dev/null & sleep 0.2; cat pids`
	for _, tc := range []struct {
		name  string
		seeds func(pids []string) []string
	}{
		{"environment entry", func([]string) []string { return []string{"TB_TEST_RUN=" + tag} }},
		{"pid", func(pids []string) []string { return []string{"pid:" + pids[0]} }},
		{"command-line pattern", func([]string) []string { return []string{"pat:sleep 30[0]"} }},
		{"run file", func(pids []string) []string {
			require.NoError(t, os.WriteFile(filepath.Join(wd, "run"), fmt.Appendf(nil, "%s %s %s\n", tag, pids[0], startTime(t, pids[0])), 0o644))
			return []string{"run:run", "TB_TEST_OTHER=" + tag}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pids := start(t, sb, map[string]string{"TB_TEST_RUN": tag}, tree)
			bystander := start(t, sb, map[string]string{"TB_TEST_RUN": "other"}, `sh -c 'sleep 301' </dev/null >/dev/null 2>&1 & echo $!`)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			require.NoError(t, Kill(ctx, sb, tc.seeds(pids)...))
			for _, p := range pids {
				require.False(t, alive(p), "pid %s of the seeded run", p)
			}
			require.True(t, alive(bystander[0]), "a process the seeds do not name")
		})
	}
}

// TestRunFileIsData: a run file the sandbox wrote (a glob, a path, a command substitution, a pid with
// another start time, pid 1 or the bot itself) takes nothing and runs nothing.
func TestRunFileIsData(t *testing.T) {
	sb, wd := localSandbox(t)
	me := fmt.Sprint(os.Getpid())
	for _, content := range []string{"", "*", "T * *", "T ../1 1", "T 1 $(touch pwned)", "T " + me + " 1", "T " + me, "$(touch pwned) " + me + " 1",
		// Named with their true start times: pid 1, and this process, an ancestor of the round on
		// the local provider (the bot, in production), are never taken.
		"T 1 " + startTime(t, "1"), "T " + me + " " + startTime(t, me)} {
		t.Run(fmt.Sprintf("%q", content), func(t *testing.T) {
			require.NoError(t, os.WriteFile(filepath.Join(wd, "run"), []byte(content+"\n"), 0o644))
			var out strings.Builder
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", Round, "sh", "run:run", "TB_TEST_RUN=T"}, Stdout: &out})
			require.NoError(t, err)
			require.Zero(t, res.ExitCode)
			require.Empty(t, strings.TrimSpace(out.String()), "nothing taken")
			require.NoFileExists(t, filepath.Join(wd, "pwned"))
		})
	}
}
