package deno

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
)

var _ sandbox.Attacher = (*Provider)(nil)

// ExposeHTTP publishes port at a public https URL, with no auth (for runtimes that serve HTTP; they
// must check their own token). It takes Deno's two steps: the host's REST expose returns a domain,
// then the exposeHttp RPC binds the port to it.
func (p *Provider) ExposeHTTP(ctx context.Context, h sandbox.Handle, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", fmt.Errorf("%w: port %d", sandbox.ErrInvalidSpec, port)
	}
	lv, _, err := p.liveFor(ctx, h)
	if err != nil {
		return "", err
	}
	var got struct {
		Domain string `json:"domain"`
	}
	u, err := p.host(lv.region, false, "api", "v3", "sandbox", lv.conn.sandboxID, "expose", "http")
	if err != nil {
		return "", fmt.Errorf("deno: expose port %d: %w", port, err)
	}
	if _, err := p.do(ctx, "expose http", http.MethodPost, u, struct{}{}, &got, true, p.opts.RequestTimeout); err != nil {
		return "", fmt.Errorf("deno: expose port %d: %w", port, err)
	}
	if got.Domain == "" {
		return "", fmt.Errorf("deno: expose port %d: no domain in the answer", port)
	}
	if err := lv.conn.call(ctx, "exposeHttp", map[string]any{"domain": got.Domain, "port": port}, nil, nil); err != nil {
		return "", p.lost(ctx, h, fmt.Errorf("deno: expose port %d: %w", port, err))
	}
	return "https://" + got.Domain, nil
}

// AttachCommand implements sandbox.Attacher (admin attach): Deno's exposeSsh gives a host and a user
// name that is the only credential, so the command is an ssh with seed 001's options, landing in the
// work directory.
func (p *Provider) AttachCommand(ctx context.Context, h sandbox.Handle, shell string) ([]string, error) {
	lv, st, err := p.liveFor(ctx, h)
	if err != nil {
		return nil, err
	}
	var got struct {
		Hostname string `json:"hostname"`
		Username string `json:"username"`
	}
	u, err := p.host(lv.region, false, "api", "v3", "sandbox", lv.conn.sandboxID, "expose", "ssh")
	if err != nil {
		return nil, fmt.Errorf("deno: expose ssh: %w", err)
	}
	if _, err := p.do(ctx, "expose ssh", http.MethodPost, u, struct{}{}, &got, true, p.opts.RequestTimeout); err != nil {
		return nil, fmt.Errorf("deno: expose ssh: %w", err)
	}
	if got.Hostname == "" || got.Username == "" {
		return nil, fmt.Errorf("deno: expose ssh: no host or user in the answer")
	}
	if shell == "" {
		shell = "sh"
	}
	return []string{"ssh", "-t", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-o", "SetEnv=TERM=xterm-256color", got.Username + "@" + got.Hostname,
		"cd '" + strings.ReplaceAll(st.WorkDir, "'", `'\''`) + "' && exec " + shell}, nil
}
