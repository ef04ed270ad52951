package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/threadbox/threadbox/cmd/threadbox/logging"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/docker"
)

// check is one doctor probe. It returns what it found when healthy, or a problem with its fix.
type check struct {
	name string
	run  func(ctx context.Context) (ok string, problem *problem)
}

type problem struct {
	what, fix string
	// warn marks a weakness that does not stop the bot (printed as WARN; doctor still exits 0).
	warn bool
}

// probeTimeout bounds each probe: a doctor that hangs on a dead socket is no doctor.
const probeTimeout = 5 * time.Second

// runDoctor prints one line per check: "ok" lines for what works, and for each problem one line that
// says what is wrong and how to fix it. It exits 1 when anything is wrong.
func (m *Main) runDoctor(ctx context.Context) error {
	cfg := m.Config
	src := "embedded defaults"
	if cfg.File != "" {
		src = cfg.File
	}
	// Lines quote configured URLs and errors that may quote them; they are redacted as the log is.
	pairs := []string{}
	for _, s := range logging.SecretsToRedact(append(cfg.Secrets(), m.getenv(anthropicKeyEnv), m.getenv(openAIKeyEnv)), cfg.Public()) {
		pairs = append(pairs, s, logging.Redacted)
	}
	secrets := strings.NewReplacer(pairs...)
	printf := func(format string, args ...any) {
		fmt.Fprint(m.Stdout, secrets.Replace(logging.RedactURLs(fmt.Sprintf(format, args...))))
	}
	printf("ok      config: %s (+ THREADBOX_* overrides)\n", src)
	problems, warnings := 0, 0
	for _, c := range m.doctorChecks() {
		cctx, cancel := context.WithTimeout(ctx, probeTimeout)
		ok, p := c.run(cctx)
		cancel()
		switch {
		case p != nil && p.warn:
			warnings++
			printf("WARN    %s: %s. Fix: %s\n", c.name, p.what, p.fix)
		case p != nil:
			problems++
			printf("PROBLEM %s: %s. Fix: %s\n", c.name, p.what, p.fix)
		case ok != "":
			printf("ok      %s: %s\n", c.name, ok)
		}
	}
	if warnings > 0 {
		fmt.Fprintf(m.Stdout, "%d warning(s) about the security posture\n", warnings)
	}
	if problems > 0 {
		fmt.Fprintf(m.Stdout, "%d problem(s) found\n", problems)
		return exitCode(1)
	}
	return nil
}

func (m *Main) doctorChecks() []check {
	cfg := m.Config
	var checks []check
	// Every enabled provider (sandbox.providers), the default first: a thread may pick any of them.
	enabled := cfg.Sandbox.EnabledProviders()
	if len(enabled) > 1 {
		checks = append(checks, check{name: "providers", run: func(context.Context) (string, *problem) {
			return fmt.Sprintf("enabled: %s (default %s); threads pick one with \"use <provider>\"",
				strings.Join(enabled, ", "), enabled[0]), nil
		}})
	}
	for _, name := range enabled {
		switch name {
		case "docker", "auto":
			checks = append(checks, check{name: "docker", run: m.checkDocker})
		case "daytona":
			checks = append(checks, check{name: "daytona", run: m.checkDaytona})
		case "deno":
			checks = append(checks, check{name: "deno", run: m.checkDeno})
		case "local":
			checks = append(checks, check{name: "sandbox", run: func(context.Context) (string, *problem) {
				if err := m.localAllowed(); err != nil {
					return "", &problem{what: "serve will refuse to start: " + oneLine(err),
						fix: "start Docker and set sandbox.provider docker, or remove the chat platform and keep http.addr on loopback"}
				}
				return "local provider: NO ISOLATION, agent commands run as host processes", nil
			}})
		}
	}
	checks = append(checks, check{name: "runtime", run: m.checkRuntime})
	checks = append(checks, check{name: "database", run: m.checkDatabase})
	checks = append(checks, check{name: "redis", run: m.checkRedis})
	return append(checks, m.postureChecks()...)
}

func (m *Main) checkDocker(ctx context.Context) (string, *problem) {
	cfg := m.Config
	host := cfg.Sandbox.Docker.Host
	where := host
	if where == "" {
		where = m.getenv("DOCKER_HOST")
	}
	if where == "" {
		where = "unix:///var/run/docker.sock"
	}
	ver, hasImage, err := docker.Probe(ctx, host, cfg.Sandbox.Image)
	if err != nil {
		fix := "start the daemon (as root: deploy/test-services.sh, or `systemctl start docker`), " +
			"or point sandbox.docker.host / DOCKER_HOST at a running one"
		if cfg.Sandbox.Provider == "auto" {
			fix += "; without it sandbox.provider auto falls back to the unisolated local provider"
		}
		return "", &problem{what: fmt.Sprintf("the Docker daemon at %s is not answering (%s)", where, oneLine(err)), fix: fix}
	}
	if !hasImage {
		return "", &problem{
			what: fmt.Sprintf("daemon %s is up at %s, but the sandbox image %s is missing", ver, where, cfg.Sandbox.Image),
			fix:  "run `make sandbox-image` (builds offline), or set sandbox.image to an image you have",
		}
	}
	return fmt.Sprintf("daemon %s at %s, image %s present", ver, where, cfg.Sandbox.Image), nil
}

// checkDaytona checks the key, the snapshot and that the API answers.
func (m *Main) checkDaytona(ctx context.Context) (string, *problem) {
	p, err := m.newDaytona()
	if err != nil {
		return "", &problem{what: oneLine(err), fix: "set sandbox.daytona.api_key (or THREADBOX_SANDBOX_DAYTONA_API_KEY)"}
	}
	snapshot := m.Config.Sandbox.Daytona.Snapshot
	if snapshot == "" {
		snapshot = m.Config.Sandbox.Image
	}
	ok, err := p.Check(ctx, snapshot)
	switch {
	case errors.Is(err, daytona.ErrUnreachable):
		return "", &problem{what: oneLine(err), fix: "check sandbox.daytona.api_url and this host's outbound network"}
	case errors.Is(err, daytona.ErrBadKey):
		return "", &problem{what: oneLine(err), fix: "create an API key in the Daytona dashboard and set sandbox.daytona.api_key"}
	case errors.Is(err, daytona.ErrNoSnapshot):
		return "", &problem{what: oneLine(err),
			fix: "create the snapshot in Daytona (daytona snapshot create), or set sandbox.daytona.snapshot to an active one"}
	case err != nil:
		return "", &problem{what: oneLine(err), fix: "check sandbox.daytona"}
	}
	return ok, nil
}

func (m *Main) checkRuntime(context.Context) (string, *problem) {
	name := m.aiRuntime()
	if name == "" {
		return "shell (messages run as shell commands; set ANTHROPIC_API_KEY or OPENAI_API_KEY for an AI agent)", nil
	}
	if names := m.runtimeNames(); len(names) > 1 {
		name = strings.Join(names, ", ")
	}
	for _, n := range m.runtimeNames() {
		if n == "shell" {
			continue
		}
		if _, err := m.modelFor(n); err != nil {
			return "", &problem{what: oneLine(err), fix: "export the model key in the bot's environment, or set runtime.name: shell (and leave " + n + " out of runtime.enabled)"}
		}
	}
	gw := m.Config.Gateway
	if gw.Enabled && m.Config.Sandbox.Provider != "local" {
		// With Docker ("auto" picks it when a daemon answers): network none, keys stay in the bot.
		return fmt.Sprintf("%s through the model gateway (keys stay in the bot; upstreams %s, %s)", name, gw.AnthropicURL, gw.OpenAIURL), nil
	}
	if m.networkMode() == "none" && m.Config.Sandbox.Provider != "local" {
		return "", &problem{
			what: fmt.Sprintf("the %s runtime must reach its model API, but sandbox.network is none and gateway.enabled is false", name),
			fix:  "set gateway.enabled: true (keeps network none and the key out of the sandbox), or sandbox.network: full",
		}
	}
	return name + " with model settings from the environment", nil
}

func (m *Main) checkRedis(ctx context.Context) (string, *problem) {
	raw := m.Config.Redis.URL
	if raw == "" {
		return "not configured (optional: dedupe and rate limits stay per process)", nil
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return "", &problem{what: fmt.Sprintf("redis.url does not parse (%s)", oneLine(err)), fix: "use redis://host:6379/0"}
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return "", &problem{
			what: fmt.Sprintf("Redis at %s is not answering (%s)", opt.Addr, oneLine(err)),
			fix:  "start redis-server, fix redis.url, or unset redis.url to run without Redis",
		}
	}
	return "reachable at " + opt.Addr, nil
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// checkDeno checks the token, the region and the base snapshot, and that the console answers.
func (m *Main) checkDeno(ctx context.Context) (string, *problem) {
	p, err := m.newDeno()
	if err != nil {
		return "", &problem{what: oneLine(err), fix: "set sandbox.deno.token (or THREADBOX_SANDBOX_DENO_TOKEN), and sandbox.deno.org with a personal token"}
	}
	defer p.Close()
	ok, err := p.Check(ctx)
	switch {
	case errors.Is(err, deno.ErrUnreachable):
		return "", &problem{what: oneLine(err), fix: "check sandbox.deno.console_url and this host's outbound network; a 5xx is Deno's outage, not your token"}
	case errors.Is(err, deno.ErrBadToken):
		return "", &problem{what: oneLine(err), fix: "create an organization token (ddo_…) in the Deno Deploy dashboard and set sandbox.deno.token"}
	case errors.Is(err, deno.ErrNoSnapshot):
		return "", &problem{what: oneLine(err),
			fix: "build the base snapshot in sandbox.deno.region (see the README's Deno section), or set sandbox.deno.base_snapshot and sandbox.deno.region to match one"}
	case err != nil:
		return "", &problem{what: oneLine(err), fix: "check sandbox.deno"}
	}
	return ok, nil
}
