package daytona_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
)

// TestDialPreview: an HTTP server inside the sandbox (network none) is reached through the preview
// link with its token, and keeps answering after the token expires (the link is refreshed on 401
// and the request replayed, body included).
func TestDialPreview(t *testing.T) {
	f := newFake(t)
	p := newProvider(t, f, nil)
	spec := sandbox.Spec{Image: dockertest.Image(), Labels: sandbox.Labels{Deployment: "daytona-dial", Thread: "t", Generation: 1}}
	h, err := p.Create(t.Context(), spec)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, p.Destroy(ctx, h))
	})
	// busybox httpd daemonizes; its CGI answers POSTs with their body.
	require.NoError(t, p.WriteFile(t.Context(), h, "www/index.html", []byte("hello from the sandbox"), 0o644))
	require.NoError(t, p.WriteFile(t.Context(), h, "www/cgi-bin/echo", []byte("#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\ncat\n"), 0o755))
	res, err := p.Exec(t.Context(), h, sandbox.ExecRequest{Cmd: []string{"httpd", "-p", "127.0.0.1:8080", "-h", "www"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return sandbox.Bind(p, h).Dial(ctx, 8080) },
	}}
	get := func() (int, string) {
		resp, err := client.Get("http://sandbox/index.html")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	post := func(msg string) (int, string) {
		resp, err := client.Post("http://sandbox/cgi-bin/echo", "text/plain", strings.NewReader(msg))
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	code, body := get()
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "hello from the sandbox", body)
	require.Equal(t, 1, f.Calls("getPortPreviewUrl"), "the link is fetched once and kept")
	code, body = post("first")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "first", body)

	f.ExpirePreviewToken(h.ID)
	code, body = post("after expiry")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "after expiry", body, "the request was replayed with its body")
	require.Equal(t, 2, f.Calls("getPortPreviewUrl"), "the link was refreshed once")
	code, body = get()
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 2, f.Calls("getPortPreviewUrl"), "the refreshed link is kept")

	// A destroyed sandbox cannot be dialled: ErrNotFound, so the caller recreates.
	require.NoError(t, p.Destroy(t.Context(), h))
	_, err = p.Dial(t.Context(), h, 8080)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
}
