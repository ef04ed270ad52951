package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The layer table of DESIGN §2, enforced on every package's direct imports (non-test files: a test
// may build fixtures from any layer). It lives here because cmd/threadbox is the one package that may
// import everything, so the table is about the module as a whole.

// layerRule says what the packages matching pkg may import from this module.
//
// Patterns are module-relative: "bot" is that package, "x/..." is x and every package below it, and
// "..." is the whole module. A segment in angle brackets matches any one path element, and the same
// name in may stands for the element it matched: under "bot/<platform>/...", "bot/<platform>/..."
// lets bot/slack import its own packages and not bot/web's.
type layerRule struct {
	pkg string
	may []string
	// why is the DESIGN §2 row the rule encodes, for the failure message.
	why string
}

// layerRules is DESIGN §2's table as data. The first rule that matches a package applies, so narrow
// rows come before the wide ones; a package that no rule matches fails the test, so a new directory
// gets a row (and DESIGN §2 a line) before it gets code.
//
// Two additions to the table's text, both leaves: prompts (templates, imports nothing of ours) may be
// used by agentpool and the runtimes; and agentpool/runtime/runtimetest, the runtimes' conformance
// suite, drives them through a real pool, store and sandbox. Neither opens a way to a chat package.
func layerRules() []layerRule {
	return []layerRule{
		{pkg: "cmd/threadbox/metrics", may: []string{"agentpool", "bot", "db"},
			why: "cmd/threadbox/metrics: the Prometheus side of agentpool.Metrics and bot.ChatMetrics; reads sessions from db"},
		{pkg: "cmd/...", may: []string{"..."},
			why: "cmd/threadbox: main, config and wiring may import everything"},
		{pkg: "bot", may: []string{"agentpool", "agentpool/runtime", "db"},
			why: "bot: the platform-neutral core may import agentpool (with its runtime event types) and db"},
		{pkg: "bot/<platform>/...", may: []string{"bot", "bot/<platform>/..."},
			why: "bot/<platform> and its fake: an adapter imports bot only (plus its SDK); adapters do not know each other"},
		{pkg: "agentpool/runtime/runtimetest", may: []string{"agentpool", "agentpool/runtime/...", "db", "sandbox/...", "prompts"},
			why: "agentpool/runtime/runtimetest: the runtimes' conformance suite runs them in a real pool and sandbox; never chat"},
		{pkg: "agentpool/runtime/...", may: []string{"agentpool/runtime/...", "sandbox", "prompts"},
			why: "agentpool/runtime/<name>: a runtime (and llmfake) imports sandbox, the runtime interface and its siblings"},
		{pkg: "agentpool/...", may: []string{"agentpool/runtime", "agentpool/internal/...", "sandbox", "db", "prompts"},
			why: "agentpool: imports sandbox, agentpool/runtime and db; never a chat package, never a concrete runtime"},
		{pkg: "sandbox", may: nil,
			why: "sandbox: the provider interfaces import nothing of ours"},
		{pkg: "sandbox/internal/...", may: []string{"sandbox"},
			why: "sandbox/internal: code that providers share (the shell-only file API) imports sandbox only"},
		{pkg: "sandbox/<provider>/...", may: []string{"sandbox", "sandbox/sandboxtest", "sandbox/internal/...", "sandbox/<provider>/..."},
			why: "sandbox/<provider>: a provider (and its fake or test helper) imports sandbox and the providers' shared internals only"},
		{pkg: "db", may: []string{"db/internal/..."},
			why: "db: the store imports nothing of ours (its sqlc code is internal)"},
		{pkg: "db/...", may: []string{"db", "db/internal/..."},
			why: "db/dbtest and db/internal: the store's own packages"},
		{pkg: "prompts/...", may: nil,
			why: "prompts: templates import nothing of ours"},
		{pkg: "deploy/...", may: nil,
			why: "deploy: image and deployment tooling (the health probe, the image test) imports nothing of ours"},
	}
}

// sdkRule confines a third-party SDK (an import path prefix) to the packages matching within:
// "Chat SDK types never leave bot/<platform>. Provider SDK and wire types never leave
// sandbox/<provider>." (DESIGN §2). A new SDK gets a row.
type sdkRule struct {
	sdk    string
	within string
}

func sdkRules() []sdkRule {
	return []sdkRule{
		{sdk: "github.com/slack-go/slack", within: "bot/slack/..."},
		{sdk: "github.com/bwmarrin/discordgo", within: "bot/discord/..."},
		{sdk: "github.com/docker/docker", within: "sandbox/docker/..."},
	}
}

// listedPkg is one package of `go list -json`, its path relative to the module.
type listedPkg struct {
	Path string
	// Imports are the direct imports of its non-test files: ours module-relative, others as they are.
	Imports []string
}

// match reports whether the module-relative path rel matches pattern, and what its <names> bound to.
func match(pattern, rel string, bound map[string]string) (bool, map[string]string) {
	if pattern == "..." {
		return true, bound
	}
	pat, p := strings.Split(pattern, "/"), strings.Split(rel, "/")
	out := map[string]string{}
	for k, v := range bound {
		out[k] = v
	}
	for i, seg := range pat {
		if seg == "..." && i == len(pat)-1 {
			return true, out
		}
		if i >= len(p) {
			return false, nil
		}
		name, isVar := strings.CutPrefix(seg, "<")
		name, closed := strings.CutSuffix(name, ">")
		switch {
		case isVar && closed && out[name] != "":
			if p[i] != out[name] {
				return false, nil
			}
		case isVar && closed:
			out[name] = p[i]
		case seg != p[i]:
			return false, nil
		}
	}
	return len(p) == len(pat), out
}

// checkLayers returns one line per import the tables forbid, and per package no rule covers.
func checkLayers(module string, rules []layerRule, sdks []sdkRule, pkgs []listedPkg) []string {
	var bad []string
	for _, p := range pkgs {
		var rule *layerRule
		var bound map[string]string
		for i := range rules {
			if ok, b := match(rules[i].pkg, p.Path, nil); ok {
				rule, bound = &rules[i], b
				break
			}
		}
		if rule == nil {
			bad = append(bad, fmt.Sprintf("%s: no row of the layer table covers it; add one to layerRules (and to DESIGN §2)", p.Path))
			continue
		}
		for _, imp := range p.Imports {
			if rel, ours := strings.CutPrefix(imp, module+"/"); ours {
				allowed := slices.ContainsFunc(rule.may, func(m string) bool { ok, _ := match(m, rel, bound); return ok })
				if !allowed {
					bad = append(bad, fmt.Sprintf("%s imports %s: the rule for %s allows only [%s] (DESIGN §2, %s)",
						p.Path, rel, rule.pkg, strings.Join(rule.may, ", "), rule.why))
				}
				continue
			}
			for _, s := range sdks {
				if imp != s.sdk && !strings.HasPrefix(imp, s.sdk+"/") {
					continue
				}
				if ok, _ := match(s.within, p.Path, nil); !ok {
					bad = append(bad, fmt.Sprintf("%s imports %s: that SDK belongs in %s only (DESIGN §2: SDK types never leave their adapter or provider)",
						p.Path, imp, s.within))
				}
			}
		}
	}
	return bad
}

// goList lists the module's packages with `go list -json`: what the compiler sees for this platform.
func goList(t *testing.T) (module string, pkgs []listedPkg) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the layer test runs `go list`; go must be on PATH")
	cmd := exec.CommandContext(t.Context(), goBin, "list", "-json=ImportPath,Module,Imports,Error", "./...")
	cmd.Dir = "../.." // the module root: this package is cmd/threadbox
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Module     *struct{ Path string }
			Imports    []string
			Error      *struct{ Err string }
		}
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Nil(t, p.Error, "go list: %s", p.ImportPath)
		require.NotNil(t, p.Module, "%s is outside a module", p.ImportPath)
		module = p.Module.Path
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		require.True(t, ok, "%s is not below the module %s", p.ImportPath, module)
		pkgs = append(pkgs, listedPkg{Path: rel, Imports: p.Imports})
	}
	return module, pkgs
}

func TestLayerTable(t *testing.T) {
	module, pkgs := goList(t)
	require.Equal(t, "github.com/threadbox/threadbox", module)

	// Not vacuous: the packages DESIGN §2 names were seen, and every row of the table applies to one.
	require.GreaterOrEqual(t, len(pkgs), 20, "go list found too few packages to check")
	var paths []string
	for _, p := range pkgs {
		paths = append(paths, p.Path)
	}
	for _, want := range []string{"cmd/threadbox", "bot", "bot/slack", "bot/web", "agentpool", "agentpool/runtime",
		"agentpool/runtime/shell", "sandbox", "sandbox/docker", "db", "prompts"} {
		require.Contains(t, paths, want)
	}
	for _, r := range layerRules() {
		require.True(t, slices.ContainsFunc(paths, func(p string) bool { ok, _ := match(r.pkg, p, nil); return ok }),
			"the row for %s matches no package: drop it or fix its pattern", r.pkg)
	}

	for _, line := range checkLayers(module, layerRules(), sdkRules(), pkgs) {
		t.Error(line)
	}
}

// TestLayerTableNeverLetsAgentpoolReachChat pins the one rule DESIGN §2 spells out beyond the table:
// agentpool never imports a chat package, whichever row of agentpool/... a package falls under.
func TestLayerTableNeverLetsAgentpoolReachChat(t *testing.T) {
	for _, r := range layerRules() {
		if r.pkg != "agentpool" && !strings.HasPrefix(r.pkg, "agentpool/") {
			continue
		}
		for _, m := range r.may {
			for _, chat := range []string{"bot", "bot/slack", "bot/web", "bot/discord"} {
				ok, _ := match(m, chat, nil)
				require.False(t, ok, "the row for %s lets it import %s (via %s)", r.pkg, chat, m)
			}
		}
	}
}

// TestLayerCheckReportsViolations runs the checker on made-up packages: it must name the package,
// the import and the rule, and it must hold an adapter to its own subtree.
func TestLayerCheckReportsViolations(t *testing.T) {
	const mod = "example.com/m"
	pkgs := []listedPkg{
		{Path: "bot/slack", Imports: []string{"context", mod + "/bot", mod + "/db", "github.com/slack-go/slack"}},
		{Path: "bot/slack/slackfake", Imports: []string{mod + "/bot/slack/internal/wire"}},
		{Path: "bot/web", Imports: []string{mod + "/bot/slack/slackfake", "github.com/slack-go/slack/socketmode"}},
		{Path: "agentpool", Imports: []string{mod + "/bot", mod + "/agentpool/runtime/shell", mod + "/sandbox"}},
		{Path: "sandbox/docker/dockertest", Imports: []string{mod + "/sandbox/docker", mod + "/sandbox/sandboxtest"}},
		{Path: "sandbox/local", Imports: []string{mod + "/sandbox/docker"}},
		{Path: "cmd/threadbox", Imports: []string{mod + "/bot/web", mod + "/sandbox/docker", "github.com/docker/docker/client"}},
		{Path: "tools/gen"},
	}
	got := checkLayers(mod, layerRules(), sdkRules(), pkgs)
	require.Equal(t, []string{
		"bot/slack imports db: the rule for bot/<platform>/... allows only [bot, bot/<platform>/...] (DESIGN §2, bot/<platform> and its fake: an adapter imports bot only (plus its SDK); adapters do not know each other)",
		"bot/web imports bot/slack/slackfake: the rule for bot/<platform>/... allows only [bot, bot/<platform>/...] (DESIGN §2, bot/<platform> and its fake: an adapter imports bot only (plus its SDK); adapters do not know each other)",
		"bot/web imports github.com/slack-go/slack/socketmode: that SDK belongs in bot/slack/... only (DESIGN §2: SDK types never leave their adapter or provider)",
		"agentpool imports bot: the rule for agentpool/... allows only [agentpool/runtime, agentpool/internal/..., sandbox, db, prompts] (DESIGN §2, agentpool: imports sandbox, agentpool/runtime and db; never a chat package, never a concrete runtime)",
		"agentpool imports agentpool/runtime/shell: the rule for agentpool/... allows only [agentpool/runtime, agentpool/internal/..., sandbox, db, prompts] (DESIGN §2, agentpool: imports sandbox, agentpool/runtime and db; never a chat package, never a concrete runtime)",
		"sandbox/local imports sandbox/docker: the rule for sandbox/<provider>/... allows only [sandbox, sandbox/sandboxtest, sandbox/internal/..., sandbox/<provider>/...] (DESIGN §2, sandbox/<provider>: a provider (and its fake or test helper) imports sandbox and the providers' shared internals only)",
		"cmd/threadbox imports github.com/docker/docker/client: that SDK belongs in sandbox/docker/... only (DESIGN §2: SDK types never leave their adapter or provider)",
		"tools/gen: no row of the layer table covers it; add one to layerRules (and to DESIGN §2)",
	}, got)
}
