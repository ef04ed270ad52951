package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/agentpool/gateway/forward"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/deno"
	"github.com/threadbox/threadbox/sandbox/docker"
)

// gatewayKey is the key AI runtimes are configured with when the gateway serves them: the in-sandbox
// forwarder (Docker) or the gateway's runtime wrapper (cloud sandboxes) replaces it with the
// sandbox's token, and the gateway that with the real key.
const gatewayKey = gateway.PlaceholderKey

// cloudProviders are the providers whose sandboxes reach the gateway over the network, at
// gateway.public_url: they have no host directory to mount the gateway's socket from.
var cloudProviders = []string{daytona.Name, deno.Name}

// gatewayClouds are the enabled cloud providers.
func (m *Main) gatewayClouds() []string {
	var out []string
	for _, name := range m.Config.Sandbox.EnabledProviders() {
		if slices.Contains(cloudProviders, name) {
			out = append(out, name)
		}
	}
	return out
}

// newGateway builds the model gateway when gateway.enabled is on and an AI runtime runs on Docker
// (prov) or on a cloud provider; nil otherwise (the runtime then gets the key itself). A cloud
// provider needs gateway.public_url: without it, its sandboxes could not reach any model, so serve
// refuses to start rather than fail every turn.
func (m *Main) newGateway(st db.Store, prov sandbox.Provider) (*gateway.Gateway, error) {
	cfg := m.Config.Gateway
	clouds := m.gatewayClouds()
	onDocker := prov.Name() == docker.Name
	if !cfg.Enabled || m.aiRuntime() == "" || (!onDocker && len(clouds) == 0) {
		return nil, nil
	}
	if len(clouds) > 0 && cfg.PublicURL == "" {
		return nil, fmt.Errorf("gateway.public_url (THREADBOX_GATEWAY_PUBLIC_URL) is required: the %s runtime runs on %s sandboxes, "+
			"which reach the model gateway over the network; set it to the https URL at which they reach this bot's %s/ "+
			"(e.g. https://bot.example.com%s)", m.aiRuntime(), strings.Join(clouds, " and "), gateway.PublicPath, gateway.PublicPath)
	}
	if w := m.cloudNetworkWarning(); w != "" {
		m.Logger.Warn(w)
	}
	secret, err := m.runtimeSecret()
	if err != nil {
		return nil, err
	}
	if !onDocker {
		g, err := gateway.New(gateway.Config{
			Secret: secret, AnthropicURL: cfg.AnthropicURL, OpenAIURL: cfg.OpenAIURL,
			AnthropicKey: m.getenv(anthropicKeyEnv), OpenAIKey: m.getenv(openAIKeyEnv),
			Budget: gatewayBudget(cfg), Prices: gatewayPrices(cfg), Currency: cfg.Currency,
			Port: cfg.Port, PublicURL: cfg.PublicURL,
		}, st, m.Logger)
		if err != nil {
			return nil, err
		}
		m.onClose(g.Close)
		m.Logger.Info("model gateway on: cloud sandboxes call it at gateway.public_url with their own token and hold no model key",
			zap.String("public_url", cfg.PublicURL), zap.Strings("providers", clouds))
		return g, nil
	}
	dir, err := filepath.Abs(cfg.SocketDir)
	if err != nil {
		return nil, fmt.Errorf("gateway.socket_dir: %w", err)
	}
	fwd, args := cfg.Forwarder, []string(nil)
	if fwd == "" {
		// This binary, as `threadbox forward`: it must be static (CGO_ENABLED=0, as make build does).
		if fwd, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("gateway.forwarder: finding this binary: %w", err)
		}
		args = []string{"forward"}
	}
	if fwd, err = filepath.Abs(fwd); err != nil {
		return nil, fmt.Errorf("gateway.forwarder: %w", err)
	}
	g, err := gateway.New(gateway.Config{
		Secret: secret, AnthropicURL: cfg.AnthropicURL, OpenAIURL: cfg.OpenAIURL,
		AnthropicKey: m.getenv(anthropicKeyEnv), OpenAIKey: m.getenv(openAIKeyEnv),
		Budget: gatewayBudget(cfg), Prices: gatewayPrices(cfg), Currency: cfg.Currency,
		SocketDir: dir, Forwarder: fwd, ForwarderArgs: args, Port: cfg.Port, PublicURL: cfg.PublicURL,
	}, st, m.Logger)
	if err != nil {
		return nil, err
	}
	m.onClose(g.Close)
	m.Logger.Info("model gateway on: sandboxes keep network none and hold no model key",
		zap.String("anthropic_url", cfg.AnthropicURL), zap.String("openai_url", cfg.OpenAIURL), zap.String("socket_dir", dir),
		zap.String("public_url", cfg.PublicURL), zap.Strings("cloud_providers", clouds))
	return g, nil
}

// cloudNetworkWarning is non-empty when cloud sandboxes of an AI runtime could not reach
// gateway.public_url: Daytona blocks all traffic and Deno allows no host unless sandbox.network is
// full, and neither provider is given a per-host allowlist for the gateway yet.
func (m *Main) cloudNetworkWarning() string {
	clouds := m.gatewayClouds()
	if len(clouds) == 0 || !m.Config.Gateway.Enabled || m.aiRuntime() == "" || m.sandboxNetwork() == sandbox.NetworkFull {
		return ""
	}
	return fmt.Sprintf("%s sandboxes reach the model gateway at gateway.public_url over their own network, which sandbox.network %s "+
		"closes (no per-host allowlist for them yet): their AI turns will fail to reach the model until sandbox.network is full",
		strings.Join(clouds, " and "), m.networkMode())
}

// serveClouds registers the enabled cloud providers with the gateway: their sandboxes' runtimes are
// pointed at gateway.public_url with their own token.
func serveClouds(gw *gateway.Gateway, provs []sandbox.Provider) {
	for _, p := range provs {
		if slices.Contains(cloudProviders, p.Name()) {
			gw.Cloud(p)
		}
	}
}

// mountGateway serves the gateway for cloud sandboxes under gateway.PublicPath on the public
// listener (the main one when http.public_addr is unset); nothing without a gateway or public URL.
func mountGateway(mux *http.ServeMux, gw *gateway.Gateway) {
	if gw == nil || gw.PublicURL() == "" {
		return
	}
	h := http.StripPrefix(gateway.PublicPath, gw.PublicHandler())
	// By method: a bare "/gateway/" would conflict with the web chat's "GET /".
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		mux.Handle(method+" "+gateway.PublicPath+"/", h)
	}
}

// runForward is `threadbox forward`: the in-sandbox side of the gateway, run as a sandbox's main
// process (see agentpool/gateway/forward).
func (m *Main) runForward(ctx context.Context) error {
	fs := flag.NewFlagSet("forward", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	var o forward.Options
	fs.StringVar(&o.Listen, "listen", fmt.Sprintf("127.0.0.1:%d", gateway.DefaultPort), "address to serve inside the sandbox")
	fs.StringVar(&o.Socket, "socket", gateway.SandboxDir+"/gateway.sock", "the gateway's unix socket")
	fs.StringVar(&o.TokenFile, "token-file", gateway.SandboxDir+"/token", "file holding the sandbox token")
	fs.StringVar(&o.EgressListen, "egress-listen", "", "address to relay to the egress proxy (restricted egress)")
	fs.StringVar(&o.EgressSocket, "egress-socket", "", "the egress proxy's unix socket")
	if err := fs.Parse(m.args); err != nil {
		return errUsage
	}
	return forward.Run(ctx, o)
}

// gatewayBudget is gateway.budget with money in millionths of the currency, as the gateway counts it.
func gatewayBudget(cfg config.Gateway) gateway.Budget {
	b := cfg.Budget
	return gateway.Budget{
		ThreadTokens: b.ThreadTokens, UserDailyTokens: b.UserDailyTokens, DailyTokens: b.DailyTokens,
		UserDailyMicros: int64(math.Round(b.UserDailyMoney * 1e6)), DailyMicros: int64(math.Round(b.DailyMoney * 1e6)),
	}
}

// gatewayPrices is gateway.prices; nil when empty (no cost is counted).
func gatewayPrices(cfg config.Gateway) gateway.Prices {
	if len(cfg.Prices) == 0 {
		return nil
	}
	p := gateway.Prices{}
	for model, pr := range cfg.Prices {
		p[model] = gateway.Price{Input: pr.Input, Output: pr.Output}
	}
	return p
}

// usageView is how status, admin stats and the ops view show the usage the gateway records.
func usageView(st db.Store, cfg config.Gateway) *bot.Usage {
	b := gatewayBudget(cfg)
	return &bot.Usage{
		Store: st, Priced: len(cfg.Prices) > 0, Currency: cfg.Currency,
		Budget: bot.UsageBudget{
			ThreadTokens: b.ThreadTokens, UserDailyTokens: b.UserDailyTokens, DailyTokens: b.DailyTokens,
			UserDailyMicros: b.UserDailyMicros, DailyMicros: b.DailyMicros,
		},
	}
}
