// Package gateway is the model gateway: an Anthropic Messages and OpenAI (chat completions and
// Responses) compatible reverse proxy inside the bot, so that model keys never enter a sandbox
// (DESIGN §7). A sandbox holds only its own token (Token), scoped to its thread and generation; the
// gateway checks it against the session row, counts each call's tokens against the budgets, records
// them on the thread's running turn, and adds the real key upstream.
//
// Docker sandboxes keep network none and reach the gateway through a unix socket in a per-sandbox
// host directory bind-mounted into the sandbox, and a static forwarder (package forward) that listens
// on the sandbox's loopback and adds the sandbox token. Provider wraps a sandbox.Provider to set that
// up; Runtime wraps a runtime.Runtime to end a turn over budget with a clear reply. Cloud sandboxes
// (Daytona, Deno: no host directory to mount) call PublicHandler at Config.PublicURL with their token
// as the API key; Cloud registers their providers, and Runtime points the runtime there.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/internal/sandboxsock"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// Defaults for Config.
const (
	DefaultAnthropicURL = "https://api.anthropic.com"
	DefaultOpenAIURL    = "https://api.openai.com/v1"
	// DefaultPort is where the forwarder listens on the sandbox's loopback.
	DefaultPort = 18080
)

// Paths inside a sandbox.
const (
	// SandboxDir is where the per-sandbox host directory (socket and token) is mounted, read-only.
	SandboxDir = "/run/threadbox"
	// ForwarderPath is where the forwarder binary is mounted, read-only.
	ForwarderPath = "/opt/threadbox/forward"
	socketName    = "gateway.sock"
	tokenName     = "token"
)

// Budget caps model use in tokens (input plus output) and, with a price table, in money; zero means
// no cap.
type Budget struct {
	// ThreadTokens caps one thread over its whole life.
	ThreadTokens int64
	// UserDailyTokens caps one user's turns per UTC day.
	UserDailyTokens int64
	// DailyTokens caps every turn of the deployment per UTC day.
	DailyTokens int64
	// UserDailyMicros and DailyMicros cap the cost of one user's turns, and of every turn, per UTC
	// day, in millionths of the price table's currency.
	UserDailyMicros int64
	DailyMicros     int64
}

// Price is what a model costs per million tokens, in the price table's currency.
type Price struct {
	Input, Output float64
}

// Prices is the price table, by model id. A key prices the model of that id and its dated snapshots
// ("claude-sonnet-4-5" prices "claude-sonnet-4-5-20250929", "gpt-4.1" prices "gpt-4.1-2025-04-14",
// and "-latest", "@20250929" or a provider's tail after the date alike), but not the other models
// whose ids it begins: "o3" does not price "o3-pro", nor "gpt-5" "gpt-5-pro", which cost many times
// more. A key ending in "*" prices every id it is a prefix of, for whoever wants a family priced
// alike ("claude-sonnet*"); "*" alone prices every other model. The longest key that applies wins. A
// model it does not price costs what the dearest entries cost (Dearest; and is logged): the model is
// the agent's to name, and one the table misses must not be free, or cheap, against the money
// budgets.
type Prices map[string]Price

// Lookup finds the price of model.
func (p Prices) Lookup(model string) (Price, bool) {
	if pr, ok := p[model]; ok {
		return pr, true
	}
	best, bestLen := "", -1
	for k := range p {
		n := -1
		switch {
		case k == "*":
		case strings.HasSuffix(k, "*"):
			if strings.HasPrefix(model, k[:len(k)-1]) {
				n = len(k) - 1
			}
		case strings.HasPrefix(model, k) && snapshotSuffix.MatchString(model[len(k):]):
			n = len(k)
		}
		if n > bestLen || (n == bestLen && n >= 0 && k < best) {
			best, bestLen = k, n
		}
	}
	if bestLen >= 0 {
		return p[best], true
	}
	pr, ok := p["*"]
	return pr, ok
}

// snapshotSuffix is what follows a model's id in the id of one of its snapshots: a date (20250929,
// 2025-04-14) or "latest", after "-" or "@", then optionally the provider's own tail
// ("-v1:0" on Bedrock).
var snapshotSuffix = regexp.MustCompile(`^[-@](?:\d{8}|\d{4}-\d{2}-\d{2}|latest)(?:[-:@].*)?$`)

// Dearest is the table's highest input and highest output price, what a model it misses costs.
func (p Prices) Dearest() Price {
	var d Price
	for _, pr := range p {
		d.Input, d.Output = max(d.Input, pr.Input), max(d.Output, pr.Output)
	}
	return d
}

// CostMicros is what u cost at price, in millionths of the currency: a price per million tokens is
// a price in millionths per token.
//
// The result is 0 to maxCallMicros whatever the price: converting a NaN, infinite or out-of-range
// float to int64 gives an arbitrary value (math.MinInt64 on amd64), which would lower the money
// totals for good.
func (pr Price) CostMicros(u Usage) int64 {
	c := math.Round(float64(u.Input)*pr.Input + float64(u.Output)*pr.Output)
	switch {
	case math.IsNaN(c) || c <= 0:
		return 0
	case c >= float64(maxCallMicros):
		return maxCallMicros
	}
	return int64(c)
}

// maxCallMicros bounds the cost of one call (a billion of the currency), so that no sum overflows.
const maxCallMicros int64 = 1e15

// Config configures the gateway.
type Config struct {
	// Secret is the service secret tokens are derived from (runtime.secret; required).
	Secret string
	// AnthropicURL and OpenAIURL are the upstreams (defaults DefaultAnthropicURL, DefaultOpenAIURL).
	AnthropicURL, OpenAIURL string
	// AnthropicKey and OpenAIKey are the real keys, added upstream. An API without a key is refused.
	AnthropicKey, OpenAIKey string
	Budget                  Budget
	// Prices turns tokens into money, for the money budgets and for showing cost; nil: no cost.
	Prices Prices
	// Currency names the price table's currency in budget replies (default "USD").
	Currency string
	// SocketDir holds one directory per sandbox (its socket and token), bind-mounted into it. It must
	// be an absolute path on the Docker daemon's host, short enough for a socket path (~80 bytes).
	SocketDir string
	// Forwarder is the static forwarder binary on the host, mounted into each sandbox; ForwarderArgs
	// come before its flags (["forward"] when it is the threadbox binary itself).
	Forwarder     string
	ForwarderArgs []string
	// Port is the forwarder's port on the sandbox's loopback (default DefaultPort).
	Port int
	// PublicURL is where cloud sandboxes (Cloud) reach PublicHandler over the network; empty: a
	// turn on a cloud sandbox is refused with a reply saying so.
	PublicURL string
	// Transport reaches the upstreams (default: a clone of http.DefaultTransport).
	Transport http.RoundTripper
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Gateway is the model gateway. It is safe for concurrent use.
type Gateway struct {
	cfg       Config
	store     db.Store
	log       *zap.Logger
	anthropic *url.URL
	openai    *url.URL
	proxy     http.Handler
	srv       *http.Server

	// socks are the per-sandbox sockets.
	socks *sandboxsock.Set

	mu sync.Mutex // protects the following, and cfg.Budget
	// refused is the budget refusal of a thread's current turn, for Runtime to turn into the reply.
	refused map[string]*BudgetError
	// unpriced remembers the models the price table missed, logged once each.
	unpriced map[string]bool
	// inFlight counts each thread's model calls in flight (maxCallsPerThread).
	inFlight map[string]int
	prov     sandbox.Provider
	// clouds are the providers whose sandboxes call PublicHandler, by name; cloudIDs remembers which
	// thread and generation their sandboxes are, by provider/id.
	clouds   map[string]sandbox.Provider
	cloudIDs map[string]ident
}

// New validates cfg and returns a gateway that serves nothing until Provider or Handler is used.
func New(cfg Config, store db.Store, log *zap.Logger) (*Gateway, error) {
	if cfg.Secret == "" {
		return nil, errors.New("gateway: a service secret is required (sandbox tokens derive from it)")
	}
	if store == nil {
		return nil, errors.New("gateway: a store is required")
	}
	cfg.AnthropicURL = cmp.Or(cfg.AnthropicURL, DefaultAnthropicURL)
	cfg.OpenAIURL = cmp.Or(cfg.OpenAIURL, DefaultOpenAIURL)
	cfg.Port = cmp.Or(cfg.Port, DefaultPort)
	cfg.Currency = cmp.Or(cfg.Currency, "USD")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Transport == nil {
		// All traffic goes to one or two model hosts, many streams at once: keep their connections
		// (http.DefaultTransport keeps 2 idle per host and dials, with a TLS handshake, for the rest).
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 64
		cfg.Transport = t
	}
	g := &Gateway{
		cfg: cfg, store: store, log: cmp.Or(log, zap.NewNop()).Named("gateway"),
		refused: map[string]*BudgetError{}, unpriced: map[string]bool{}, inFlight: map[string]int{},
		clouds: map[string]sandbox.Provider{}, cloudIDs: map[string]ident{},
	}
	var err error
	if g.anthropic, err = parseUpstream("anthropic_url", cfg.AnthropicURL); err != nil {
		return nil, err
	}
	if g.openai, err = parseUpstream("openai_url", cfg.OpenAIURL); err != nil {
		return nil, err
	}
	if cfg.PublicURL != "" {
		if _, err = parseUpstream("public_url", cfg.PublicURL); err != nil {
			return nil, err
		}
	}
	if cfg.Forwarder != "" {
		if g.cfg.Forwarder, err = sandboxsock.InstallForwarder("gateway", cfg.SocketDir, cfg.Forwarder); err != nil {
			return nil, err
		}
	}
	g.proxy = g.newProxy()
	g.srv = &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 30 * time.Second,
		ConnContext:       g.connContext,
		ErrorLog:          zap.NewStdLog(g.log),
	}
	g.socks = sandboxsock.New(sandboxsock.Options{Root: cfg.SocketDir, Socket: socketName, Name: "gateway",
		Server: g.srv, Log: g.log, Prepare: g.writeToken})
	return g, nil
}

func parseUpstream(name, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gateway.%s %q: must be an http(s) URL", name, raw)
	}
	return u, nil
}

// LocalURL is the gateway's base URL as a runtime inside a sandbox sees it (the forwarder), without
// an API prefix; append AnthropicPath or OpenAIPath.
func (g *Gateway) LocalURL() string { return fmt.Sprintf("http://127.0.0.1:%d", g.cfg.Port) }

// API prefixes of the gateway: <base>/anthropic is an Anthropic base URL (append /v1 for SDKs that
// want it), <base>/openai an OpenAI one (with /v1 already, as the upstream URL has it).
const (
	AnthropicPath = "/anthropic"
	OpenAIPath    = "/openai"
)

// Close stops every per-sandbox listener and the connections on them. The socket directories stay:
// the sandboxes still mount them, and the next process listens there again.
func (g *Gateway) Close() error {
	g.socks.Close()
	return g.srv.Close()
}

// ctxKey keys the request context values of the gateway.
type ctxKey int

const (
	ctxConnIdent ctxKey = iota
	ctxCall
	// ctxPublic marks a request that came in over PublicHandler.
	ctxPublic
)

// connContext tags a connection with the sandbox whose socket it came in on.
func (g *Gateway) connContext(ctx context.Context, c net.Conn) context.Context {
	if id, ok := g.socks.Owner(c.LocalAddr().String()); ok {
		ctx = context.WithValue(ctx, ctxConnIdent, id)
	}
	return ctx
}
