package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDoctorReportsSecurityPosture: doctor has one line each for the network mode, the gateway, the
// allowlists, disk enforcement, the root filesystem and where the web chat listens; the weak ones are
// warnings with their fix, which do not fail doctor on their own.
func TestDoctorReportsSecurityPosture(t *testing.T) {
	deadDocker := "THREADBOX_SANDBOX_DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "none.sock")
	slack := []string{"THREADBOX_SLACK_BOT_TOKEN=xoxb-posture-token", "THREADBOX_SLACK_SIGNING_SECRET=posture-signing-secret"}
	for _, tc := range []struct {
		name string
		env  []string
		want []string // pairs: a line's prefix, then text the line must contain
	}{
		{"defaults", []string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker}, []string{
			"ok      network:", "none",
			"ok      gateway:", "not needed",
			"ok      access:", "no chat platform configured",
			"ok      disk:", "work directory is measured during and after each turn",
			"ok      root fs:", "read-only; /tmp is a noexec tmpfs of 512 MiB",
			"ok      web chat:", "on 127.0.0.1:8080 (loopback)",
		}},
		{"an open bot on the internet", append([]string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker,
			"THREADBOX_SANDBOX_NETWORK=full", "THREADBOX_HTTP_ADDR=0.0.0.0:8080", "THREADBOX_HTTP_TOKEN=posture-web-token",
			"THREADBOX_ACCESS_OWNER_ONLY_CONTROLS=false", "THREADBOX_SANDBOX_READ_ONLY_ROOT=false"}, slack...), []string{
			"WARN    network:", "169.254.169.254",
			"WARN    access:", "Fix: set access.slack_teams",
			"WARN    access:", "owner_only_controls is off",
			"WARN    root fs:", "Fix: set sandbox.read_only_root: true",
			"WARN    web chat:", "Fix: keep http.addr on 127.0.0.1 and put the webhooks on http.public_addr",
		}},
		{"an AI runtime without the gateway", []string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker,
			"ANTHROPIC_API_KEY=sk-posture-not-real", "THREADBOX_GATEWAY_ENABLED=false"}, []string{
			"WARN    gateway:", "not configured",
			"ok      root fs:", "writable: the claude-code runtime keeps its sessions in the home directory",
		}},
		{"restricted egress, the default for AI runtimes", []string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker,
			"ANTHROPIC_API_KEY=sk-posture-not-real", "THREADBOX_SANDBOX_EGRESS_ALLOW=registry.npmjs.org"}, []string{
			"ok      network:", "restricted: network none; the model gateway and, through the egress proxy, registry.npmjs.org",
		}},
		{"restricted egress naming a private address", []string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker,
			"THREADBOX_SANDBOX_NETWORK=restricted", "THREADBOX_SANDBOX_EGRESS_ALLOW=10.0.0.0/8"}, []string{
			"WARN    network:", "names addresses (10.0.0.0/8)",
		}},
		{"the gateway without budgets", []string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker,
			"ANTHROPIC_API_KEY=sk-posture-not-real"}, []string{
			"WARN    gateway:", "Fix: set gateway.budget.thread_tokens",
		}},
		{"the gateway with a budget", []string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker,
			"ANTHROPIC_API_KEY=sk-posture-not-real", "THREADBOX_GATEWAY_BUDGET_THREAD_TOKENS=100000"}, []string{
			"ok      gateway:", "enabled: model keys stay in the bot; budgets in tokens (0: none): 100000 per thread",
		}},
		{"locked down", append([]string{"THREADBOX_SANDBOX_PROVIDER=docker", deadDocker,
			"THREADBOX_ACCESS_SLACK_TEAMS=T1", "THREADBOX_ACCESS_USERS=slack:U1", "THREADBOX_HTTP_PUBLIC_ADDR=0.0.0.0:8443",
			"THREADBOX_HTTP_TOKEN=posture-web-token"}, slack...), []string{
			"ok      access:", "1 workspace(s), 0 server(s), 0 channel(s), 1 user(s) listed",
			"ok      web chat:", "webhooks alone on 0.0.0.0:8443",
		}},
		{"local provider with Slack", append([]string{"THREADBOX_SANDBOX_PROVIDER=local",
			"THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true"}, slack...), []string{
			"PROBLEM sandbox:", "serve will refuse to start",
			"WARN    disk:", "not enforced",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _ := runMain(t, baseEnv(t, tc.env...), "doctor")
			for i := 0; i < len(tc.want); i += 2 {
				line := findLine(out, tc.want[i])
				require.NotEmpty(t, line, "a %q line:\n%s", tc.want[i], out)
				require.Contains(t, line, tc.want[i+1])
			}
			require.NotContains(t, out, "posture-web-token")
			require.NotContains(t, out, "sk-posture-not-real")
		})
	}
	out, _, err := runMain(t, baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=local", "THREADBOX_SANDBOX_LOCAL_I_UNDERSTAND_NO_ISOLATION=true",
		"THREADBOX_SANDBOX_LOCAL_DIR="+t.TempDir()), "doctor")
	require.NoError(t, err, "warnings alone do not fail doctor:\n%s", out)
	require.Contains(t, out, "warning(s) about the security posture")
}
