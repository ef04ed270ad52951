package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/gateway"
	"github.com/threadbox/threadbox/agentpool/gateway/forward"
	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/cmd/threadbox/config"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker"
)

// gatewayKey is the key AI runtimes are configured with when the gateway serves them: the in-sandbox
// forwarder replaces it with the sandbox's token, and the gateway with the real key.
const gatewayKey = "threadbox-gateway"

// newGateway builds the model gateway when an AI runtime is enabled on Docker and gateway.enabled is on;
// nil otherwise (the runtime then gets the key itself).
func (m *Main) newGateway(st db.Store, prov sandbox.Provider) (*gateway.Gateway, error) {
	cfg := m.Config.Gateway
	if !cfg.Enabled || m.aiRuntime() == "" || prov.Name() != docker.Name {
		return nil, nil
	}
	secret, err := m.runtimeSecret()
	if err != nil {
		return nil, err
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
		SocketDir: dir, Forwarder: fwd, ForwarderArgs: args, Port: cfg.Port,
	}, st, m.Logger)
	if err != nil {
		return nil, err
	}
	m.onClose(g.Close)
	m.Logger.Info("model gateway on: sandboxes keep network none and hold no model key",
		zap.String("anthropic_url", cfg.AnthropicURL), zap.String("openai_url", cfg.OpenAIURL), zap.String("socket_dir", dir))
	return g, nil
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
