package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/db"
	"github.com/threadbox/threadbox/sandbox"
)

// PlaceholderKey is the key AI runtimes are configured with when the gateway serves them. It opens
// nothing: in a Docker sandbox the forwarder replaces it with the sandbox's token; for a cloud
// sandbox Runtime replaces it before the runtime's process starts (see publicSandbox).
const PlaceholderKey = "threadbox-gateway"

// PublicPath is where the bot serves PublicHandler; Config.PublicURL must lead to it.
const PublicPath = "/gateway"

// Cloud registers p as a provider whose sandboxes reach the gateway over the network, at
// Config.PublicURL, with their token (Daytona, Deno): they have no host directory to mount a socket
// from. p is not wrapped; the gateway only asks it which thread a sandbox belongs to (its labels).
func (g *Gateway) Cloud(p sandbox.Provider) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.clouds[p.Name()] = p
}

// cloud is the registered cloud provider of a handle, if it is one.
func (g *Gateway) cloud(h sandbox.Handle) (sandbox.Provider, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.clouds[h.Provider]
	return p, ok
}

// callsOverNetwork says whether a session's sandbox is on a cloud provider: only those tokens are
// good at the public URL. The handle names the sandbox's provider; before there is one, the session's.
func (g *Gateway) callsOverNetwork(sess db.Session) bool {
	var h struct {
		Provider string `json:"provider"`
	}
	_ = json.Unmarshal(sess.Handle, &h)
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.clouds[cmp.Or(h.Provider, sess.Provider)]
	return ok
}

// identifyCloud says which thread and generation a cloud sandbox belongs to: remembered, else read
// from its labels (one provider call per sandbox and process; labels never change).
func (g *Gateway) identifyCloud(ctx context.Context, p sandbox.Provider, h sandbox.Handle) (ident, error) {
	key := h.Provider + "/" + h.ID
	g.mu.Lock()
	id, ok := g.cloudIDs[key]
	g.mu.Unlock()
	if ok {
		return id, nil
	}
	info, err := p.Inspect(ctx, h)
	if err != nil {
		return ident{}, fmt.Errorf("gateway: finding the thread of %s sandbox %s: %w", h.Provider, h.ID, err)
	}
	l := sandbox.ParseLabels(info.Labels)
	if l.Thread == "" || l.Generation < 1 {
		return ident{}, fmt.Errorf("gateway: %s sandbox %s has no thread and generation labels", h.Provider, h.ID)
	}
	id = ident{Thread: l.Thread, Gen: l.Generation}
	g.mu.Lock()
	g.cloudIDs[key] = id
	g.mu.Unlock()
	return id, nil
}

// PublicURL is the gateway's base URL as a cloud sandbox sees it (Config.PublicURL, no trailing
// slash); empty when none is configured.
func (g *Gateway) PublicURL() string { return strings.TrimSuffix(g.cfg.PublicURL, "/") }

// PublicHandler is the gateway as cloud sandboxes reach it, for the bot to serve under PublicPath
// (stripped). It is the same gateway: the token in x-api-key or Authorization: Bearer names the
// thread and generation, is refused unless that generation's session is live and a turn runs, and
// the budgets and usage apply as on the socket; and the token's sandbox must be on a cloud provider.
// It lifts the server's write timeout, which a long streamed answer would otherwise hit.
func (g *Gateway) PublicHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		g.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxPublic, true)))
	})
}

// forCloud is sb as the runtime must see it: on a cloud sandbox, one that rewrites the runtime's
// gateway settings to the public URL and this sandbox's token (publicSandbox), with its thread and
// generation; any other sandbox unchanged. A non-nil refusal ends the turn instead.
func (g *Gateway) forCloud(ctx context.Context, sb sandbox.Sandbox) (sandbox.Sandbox, ident, *runtime.NoPublicURLError, error) {
	h := sb.Handle()
	p, ok := g.cloud(h)
	if !ok {
		return sb, ident{}, nil, nil
	}
	if g.PublicURL() == "" {
		g.log.Warn("a turn on a cloud sandbox, but gateway.public_url is empty", zap.String("provider", h.Provider))
		return nil, ident{}, &runtime.NoPublicURLError{Provider: h.Provider}, nil
	}
	id, err := g.identifyCloud(ctx, p, h)
	if err != nil {
		return nil, ident{}, nil, err
	}
	rw := publicRewrite{local: g.LocalURL(), public: g.PublicURL(), token: Token(g.cfg.Secret, id.Thread, id.Gen)}
	return &publicSandbox{Sandbox: sb, rw: rw}, id, nil, nil
}

// publicRewrite turns the runtime's gateway settings, made for the in-sandbox forwarder, into a
// cloud sandbox's: the forwarder's address becomes the public URL, and a value that is exactly the
// placeholder key becomes the sandbox's token. The runtime never holds a real key, so none can be
// passed on.
type publicRewrite struct {
	local, public, token string
}

func (rw publicRewrite) value(v string) string {
	if v == PlaceholderKey {
		return rw.token
	}
	return strings.ReplaceAll(v, rw.local, rw.public)
}

func (rw publicRewrite) env(env map[string]string) map[string]string {
	if env == nil {
		return nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = rw.value(v)
	}
	return out
}

// publicSandbox is a cloud sandbox as the runtime sees it: every process it starts gets the
// rewritten environment (runtimes pass the base URL and key there, never in files).
type publicSandbox struct {
	sandbox.Sandbox
	rw publicRewrite
}

// Exec implements sandbox.Sandbox.
func (s *publicSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	req.Env = s.rw.env(req.Env)
	return s.Sandbox.Exec(ctx, req)
}
