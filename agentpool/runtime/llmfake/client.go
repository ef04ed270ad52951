package llmfake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client drives a running fake through its control endpoints.
type Client struct {
	// HTTP reaches the fake; for one inside a sandbox, a client that dials through the provider.
	HTTP *http.Client
	// URL is the fake's base URL ("http://127.0.0.1:8089").
	URL string
}

// Health checks that the fake answers.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "health", nil, nil)
}

// SetScript replaces the fake's script.
func (c *Client) SetScript(ctx context.Context, s Script) error {
	return c.do(ctx, http.MethodPut, "script", s, nil)
}

// Requests returns the recorded model calls, oldest first.
func (c *Client) Requests(ctx context.Context) ([]Request, error) {
	var out []Request
	err := c.do(ctx, http.MethodGet, "requests", nil, &out)
	return out, err
}

// Reset forgets the recorded requests.
func (c *Client) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "requests", nil, nil)
}

func (c *Client) do(ctx context.Context, method, name string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.URL, "/")+ControlPrefix+name, body)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("llmfake %s %s: %w", method, name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("llmfake %s %s: %s: %s", method, name, resp.Status, bytes.TrimSpace(msg))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("llmfake %s %s: %w", method, name, err)
		}
	}
	return nil
}
