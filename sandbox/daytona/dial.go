package daytona

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona/internal/api"
)

// maxReplayBody bounds a request body kept for a replay after a token refresh.
const maxReplayBody = 8 << 20

// previewLink is a port's preview URL and the token it needs.
type previewLink struct {
	url, token string
}

// Dial implements sandbox.Dialer for runtimes that serve HTTP. Daytona reaches a port only through
// its preview proxy, which carries HTTP: the returned conn takes HTTP/1.1 requests, sends each to
// the port's preview link with its token (X-Daytona-Preview-Token), and writes the answers back,
// streaming them. When the proxy answers 401 or 403 (the token expired), the link is fetched again
// and the request replayed once; so is a request that could not reach the proxy at all. Raw TCP and
// protocol upgrades are not carried.
func (p *Provider) Dial(ctx context.Context, h sandbox.Handle, port int) (net.Conn, error) {
	if _, err := decodeHandle(h); err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial port %d: %w", port, sandbox.ErrInvalidSpec)
	}
	if _, err := p.previewLink(ctx, h.ID, port, false); err != nil {
		return nil, err
	}
	client, server := net.Pipe()
	go p.servePreview(context.WithoutCancel(ctx), server, h.ID, port)
	return &previewConn{Conn: client, addr: previewAddr(fmt.Sprintf("%s:%d", h.ID, port))}, nil
}

// previewLink returns the cached link for id:port, or fetches it (always, when refresh is set).
func (p *Provider) previewLink(ctx context.Context, id string, port int, refresh bool) (previewLink, error) {
	key := fmt.Sprintf("%s:%d", id, port)
	p.mu.Lock()
	l, ok := p.preview[key]
	p.mu.Unlock()
	if ok && !refresh {
		return l, nil
	}
	var u api.PortPreviewUrl
	err := p.call(ctx, "preview url "+key, func(ctx context.Context) (*http.Response, error) {
		return p.api.GetPortPreviewUrl(ctx, id, float32(port), nil)
	}, &u)
	if err != nil {
		return previewLink{}, fmt.Errorf("dial port %d in %s: %w", port, id, err)
	}
	if l, err = parsePreview(u.Url, u.Token); err != nil {
		return previewLink{}, fmt.Errorf("dial port %d in %s: %w", port, id, err)
	}
	p.mu.Lock()
	p.preview[key] = l
	p.mu.Unlock()
	return l, nil
}

// parsePreview normalises a preview link: the token may come in the URL's query as tkn instead of
// beside it, and requests are appended to the URL's path, so the query is dropped.
func parsePreview(raw, token string) (previewLink, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return previewLink{}, fmt.Errorf("preview url %q: not an absolute URL", raw)
	}
	if t := u.Query().Get("tkn"); t != "" && token == "" {
		token = t
	}
	u.RawQuery, u.Fragment = "", ""
	return previewLink{url: strings.TrimSuffix(u.String(), "/"), token: token}, nil
}

func (p *Provider) forgetPreviews(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.preview {
		if strings.HasPrefix(k, id+":") {
			delete(p.preview, k)
		}
	}
}

// servePreview reads requests from conn and answers each through the preview link until conn closes.
func (p *Provider) servePreview(ctx context.Context, conn net.Conn, id string, port int) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return // the caller closed the conn, or sent something that is not HTTP
		}
		resp, err := p.forward(ctx, req, id, port)
		if err != nil {
			resp = &http.Response{
				StatusCode: http.StatusBadGateway, ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"text/plain"}},
				Body:   io.NopCloser(strings.NewReader(err.Error())), ContentLength: int64(len(err.Error())),
			}
		}
		werr := resp.Write(conn)
		resp.Body.Close()
		if werr != nil || req.Close || resp.Close {
			return
		}
	}
}

// forward sends req to the preview link, refreshing the link and replaying once on 401/403.
func (p *Provider) forward(ctx context.Context, in *http.Request, id string, port int) (*http.Response, error) {
	body, err := io.ReadAll(io.LimitReader(in.Body, maxReplayBody+1))
	in.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(body) > maxReplayBody {
		return nil, fmt.Errorf("request body over %d bytes", maxReplayBody)
	}
	for attempt := 0; ; attempt++ {
		link, err := p.previewLink(ctx, id, port, attempt > 0)
		if err != nil {
			return nil, err
		}
		out, err := http.NewRequestWithContext(ctx, in.Method, link.url+in.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		out.Header = in.Header.Clone()
		out.Header.Set("X-Daytona-Preview-Token", link.token)
		out.Header.Set("X-Daytona-Skip-Preview-Warning", "true")
		resp, err := p.hc.Do(out)
		if err != nil {
			if attempt == 0 && unsent(err) {
				continue // the link's host may have moved: refresh it (the request never left)
			}
			return nil, err
		}
		if (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && attempt == 0 {
			resp.Body.Close()
			continue
		}
		// The answer goes back over a kept-alive HTTP/1.1 conn, framed anew by Response.Write: an
		// answer of unknown length (streamed, or ended by the upstream closing) is sent chunked.
		resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
		resp.TransferEncoding = nil
		if resp.ContentLength < 0 {
			resp.TransferEncoding = []string{"chunked"}
		}
		resp.Close = false
		return resp, nil
	}
}

// previewConn is the caller's end of the pipe, with a meaningful remote address.
type previewConn struct {
	net.Conn
	addr previewAddr
}

func (c *previewConn) RemoteAddr() net.Addr { return c.addr }

// previewAddr names the far end: sandbox:port through the preview proxy.
type previewAddr string

func (a previewAddr) Network() string { return "daytona-preview" }
func (a previewAddr) String() string  { return string(a) }
