package main

import (
	"cmp"
	"context"
	"fmt"
	"github.com/threadbox/threadbox/agentpool/egress"
	"strings"

	"github.com/threadbox/threadbox/agentpool"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
)

// The security posture doctor reports: one line per aspect, each weak one a warning with its fix.
// Warnings do not fail doctor (the defaults are meant for one person on one machine); problems do.

func (m *Main) postureChecks() []check {
	return []check{
		{name: "network", run: m.checkNetwork},
		{name: "gateway", run: m.checkGateway},
		{name: "access", run: m.checkAccess},
		{name: "disk", run: m.checkDisk},
		{name: "root fs", run: m.checkRootFS},
		{name: "web chat", run: m.checkWebChat},
	}
}

func warning(what, fix string) *problem { return &problem{what: what, fix: fix, warn: true} }

func (m *Main) checkNetwork(context.Context) (string, *problem) {
	mode := m.networkMode()
	switch {
	case m.Config.Sandbox.Provider == "local":
		return "", warning("host network: the local provider runs agent commands as host processes",
			"use sandbox.provider docker")
	case mode == string(sandbox.NetworkFull):
		return "", warning("sandbox.network full: with Docker, sandboxes get a bridge network of this deployment's own with "+
			"inter-container traffic off, but they still reach the host's services, the LAN and the cloud metadata address (169.254.169.254)",
			"use sandbox.network: restricted with sandbox.egress.allow; if full is needed, drop traffic from the sandbox network "+
				"to 169.254.169.254, the host and the LAN in iptables' DOCKER-USER chain")
	case mode == networkRestricted:
		pol, err := egress.ParsePolicy(m.Config.Sandbox.Egress.Allow)
		if err != nil {
			return "", &problem{what: oneLine(err), fix: "fix sandbox.egress.allow"}
		}
		if explicit := pol.Explicit(); len(explicit) > 0 {
			return "", warning("restricted, but sandbox.egress.allow names addresses ("+strings.Join(explicit, ", ")+
				"): sandboxes reach them even when they are private, loopback or link-local",
				"list host names instead, unless the address is an internal mirror or forge you mean to open")
		}
		hosts := "nothing else"
		if !pol.Empty() {
			hosts = strings.Join(m.Config.Sandbox.Egress.Allow, ", ")
		}
		return "restricted: network none; the model gateway and, through the egress proxy, " + hosts +
			" (public addresses only); everything else is refused and counted", nil
	}
	return "none: sandboxes have loopback only", nil
}

// checkGateway: whether model keys stay in the bot (the model gateway) and what bounds their use.
func (m *Main) checkGateway(context.Context) (string, *problem) {
	gw, name := m.Config.Gateway, m.aiRuntime()
	switch {
	case name == "":
		return "not needed (the shell runtime uses no model key)", nil
	case !gw.Enabled || m.Config.Sandbox.Provider == "local":
		return "", warning("not configured: the "+name+" runtime gets the model key in its environment inside the sandbox, "+
			"where the agent can read it", "set gateway.enabled: true (with sandbox.provider docker, or daytona/deno and gateway.public_url)")
	}
	if clouds := m.gatewayClouds(); len(clouds) > 0 && gw.PublicURL == "" {
		return "", &problem{what: "serve will refuse to start: the " + name + " runtime runs on " + strings.Join(clouds, " and ") +
			" sandboxes, which reach the model gateway over the network, and gateway.public_url is empty",
			fix: "set gateway.public_url to the https URL at which those sandboxes reach this bot's /gateway/ (reachable from the cloud; TLS is yours to put in front)"}
	}
	if w := m.cloudNetworkWarning(); w != "" {
		return "", warning(w, "set sandbox.network: full (Docker sandboxes then get their own bridge network; see Network modes)")
	}
	b := gw.Budget
	if b.ThreadTokens == 0 && b.UserDailyTokens == 0 && b.DailyTokens == 0 && b.UserDailyMoney == 0 && b.DailyMoney == 0 {
		return "", warning("enabled (model keys stay in the bot), but no budget bounds what a runaway agent spends",
			"set gateway.budget.thread_tokens, user_daily_tokens or daily_tokens (or *_money with gateway.prices)")
	}
	out := fmt.Sprintf("enabled: model keys stay in the bot; budgets in tokens (0: none): %d per thread, %d per user a day, %d a day",
		b.ThreadTokens, b.UserDailyTokens, b.DailyTokens)
	if b.UserDailyMoney > 0 || b.DailyMoney > 0 {
		out += fmt.Sprintf("; in %s: %g per user a day, %g a day", gw.Currency, b.UserDailyMoney, b.DailyMoney)
	}
	if clouds := m.gatewayClouds(); len(clouds) > 0 {
		out += fmt.Sprintf("; %s sandboxes call it at %s with their own token", strings.Join(clouds, " and "), gw.PublicURL)
	}
	return out, nil
}

func (m *Main) checkAccess(context.Context) (string, *problem) {
	cfg := m.Config
	platform := cfg.ChatPlatform()
	if platform == "" {
		return "no chat platform configured; the web chat is gated by http.token and http.trust_loopback", nil
	}
	var weak []string
	if cfg.Access.Open() {
		weak = append(weak, "access lists are empty, so everyone in any workspace or server that installs the app may use the bot")
	}
	if !cfg.Access.OwnerOnlyControls {
		weak = append(weak, "access.owner_only_controls is off, so any thread member may reset or stop it")
	}
	if len(weak) > 0 {
		return "", warning(strings.Join(weak, "; "),
			"set access.slack_teams or access.discord_guilds, and access.users or access.channels (and keep access.owner_only_controls: true)")
	}
	a := cfg.Access
	return fmt.Sprintf("%d workspace(s), %d server(s), %d channel(s), %d user(s) listed; DMs %s; reset and stop owner-only",
		len(a.SlackTeams), len(a.DiscordGuilds), len(a.Channels), len(a.Users), onOff(a.DMs)), nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (m *Main) checkDisk(ctx context.Context) (string, *problem) {
	cfg := m.Config.Sandbox
	switch {
	case cfg.Provider == "local":
		return "", warning("not enforced: the local provider's sandboxes are host directories", "use sandbox.provider docker")
	case cfg.Resources.DiskMB == 0:
		return "", warning("sandbox.resources.disk_mb is 0: no disk limit", "set sandbox.resources.disk_mb (1024 - 102400)")
	}
	how := fmt.Sprintf("disk_mb %d: no file may grow past it, and the work directory is measured during and after each turn "+
		"(the turn stops when over, checked every %s)", cfg.Resources.DiskMB, agentpool.DefaultLimitCheckInterval)
	p, err := docker.New(ctx, docker.Options{Host: cfg.Docker.Host})
	if err != nil {
		return how + "; the container layer: unknown (Docker is not answering)", nil
	}
	defer p.Close()
	layer, detail := p.StorageQuota()
	switch {
	case m.readOnlyRoot():
		return how + "; the container layer is read-only", nil
	case layer:
		return how + "; the container layer is capped by --storage-opt size (" + detail + ")", nil
	}
	return "", warning(how+"; the container layer is not capped ("+detail+"), and the root is writable, so files written outside "+
		"the work directory are bounded only per file", "put /var/lib/docker on xfs mounted with pquota, or use the shell runtime with sandbox.read_only_root: true")
}

func (m *Main) readOnlyRoot() bool {
	// One spec serves every enabled runtime: read-only only if it applies to them all.
	for _, n := range m.runtimeNames() {
		if !config.ReadOnlyRootApplies(n) {
			return false
		}
	}
	return m.Config.Sandbox.ReadOnlyRoot
}

func (m *Main) checkRootFS(context.Context) (string, *problem) {
	cfg := m.Config.Sandbox
	switch {
	case cfg.Provider == "local":
		return "", nil
	case m.readOnlyRoot():
		return fmt.Sprintf("read-only; /tmp is a noexec tmpfs of %d MiB", cmp.Or(cfg.Resources.TmpMB, sandbox.DefaultTmpMB)), nil
	case cfg.ReadOnlyRoot:
		return "writable: the " + m.aiRuntime() + " runtime keeps its sessions in the home directory", nil
	}
	return "", warning("writable (sandbox.read_only_root: false)", "set sandbox.read_only_root: true")
}

func (m *Main) checkWebChat(context.Context) (string, *problem) {
	h := m.Config.HTTP
	where := "on " + h.Addr
	if h.Loopback() {
		where += " (loopback)"
	}
	who := []string{}
	if h.TrustLoopback {
		who = append(who, "clients on this machine as web:local (http.trust_loopback)")
	}
	if h.Token != "" {
		who = append(who, "token holders as web:token")
	}
	if len(who) == 0 {
		who = append(who, "nobody until http.token or http.trust_loopback is set")
	}
	line := where + ", letting in " + strings.Join(who, " and ")
	if h.PublicAddr != "" {
		line += "; webhooks alone on " + h.PublicAddr + " (http.public_addr)"
	}
	switch {
	case !h.Loopback() && h.PublicAddr == "" && m.Config.ChatPlatform() != "":
		return "", warning(line+": the web chat and admin API share the public listener with the webhooks",
			"keep http.addr on 127.0.0.1 and put the webhooks on http.public_addr")
	case h.TrustLoopback && (!h.Loopback() || m.Config.ChatPlatform() != ""):
		return "", warning(line+": behind a reverse proxy or tunnel on this machine that adds no X-Forwarded-For, every visitor is web:local",
			"set http.trust_loopback: false and use http.token")
	}
	return line, nil
}
