package gateway

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/threadbox/threadbox/agentpool/gateway/forward"
	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestProviderLifecycle: a created sandbox mounts its own directory and the installed forwarder
// read-only and runs the forwarder; its socket answers through the forwarder with the sandbox's token
// in place of the runtime's key; after a bot restart, Inspect serves the socket again; Destroy
// removes it; a recreated generation replaces the old one's directory.
func TestProviderLifecycle(t *testing.T) {
	e := newEnv(t, Budget{})
	fwdSrc := filepath.Join(t.TempDir(), "fwd")
	require.NoError(t, os.WriteFile(fwdSrc, []byte("#!forwarder"), 0o755))
	socketDir := shortTempDir(t)
	newGW := func() *Gateway {
		g, err := New(Config{Secret: testSecret, AnthropicURL: e.upstreamURL, AnthropicKey: anthropicKey, OpenAIKey: openAIKey,
			SocketDir: socketDir, Forwarder: fwdSrc}, e.store, zaptest.NewLogger(t))
		require.NoError(t, err)
		return g
	}
	g := newGW()
	fake := sandboxfake.New()
	prov := g.Provider(fake)
	ctx := t.Context()

	gen := e.session(t, "web:c1")
	e.turn(t, "web:c1", "U1", "ev1")
	h, err := prov.Create(ctx, sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: "web:c1", Generation: gen}})
	require.NoError(t, err)
	dir := g.SandboxDir("web:c1", gen)
	box := fake.Box(h.ID)
	require.Equal(t, []sandbox.Mount{
		{Source: dir, Target: SandboxDir, ReadOnly: true},
		{Source: filepath.Join(socketDir, "threadbox-forward"), Target: ForwarderPath, ReadOnly: true},
	}, box.Spec.Mounts)
	require.Equal(t, []string{ForwarderPath, "-listen", "127.0.0.1:18080", "-socket", "/run/threadbox/gateway.sock", "-token-file", "/run/threadbox/token"}, box.Spec.Command)
	installed, err := os.ReadFile(filepath.Join(socketDir, "threadbox-forward"))
	require.NoError(t, err)
	require.Equal(t, "#!forwarder", string(installed))

	call := func() int {
		srv := httptest.NewServer(forward.Handler(forward.Options{Socket: filepath.Join(dir, socketName), TokenFile: filepath.Join(dir, tokenName)}))
		defer srv.Close()
		resp := (&env{url: srv.URL}).do(ctx, t, apiCalls[0], "placeholder", "hi", true)
		readAll(t, resp)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, call(), "through the forwarder and the socket")

	// A bot restart: the new process serves the socket again once it sees the sandbox.
	require.NoError(t, g.Close())
	g = newGW()
	prov = g.Provider(fake)
	t.Cleanup(func() { _ = g.Close() })
	_, err = net.Dial("unix", filepath.Join(dir, socketName))
	require.Error(t, err, "nothing serves the socket before the sandbox is seen")
	_, err = prov.Inspect(ctx, h)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, call(), "served again after Inspect")

	// Recreated: the old generation's directory goes when the new one is made.
	gen2 := e.session(t, "web:c1")
	h2, err := prov.Create(ctx, sandbox.Spec{Image: "img", Labels: sandbox.Labels{Deployment: "d", Thread: "web:c1", Generation: gen2}})
	require.NoError(t, err)
	require.NoDirExists(t, dir)
	require.NoError(t, prov.Destroy(ctx, h2))
	require.NoDirExists(t, g.SandboxDir("web:c1", gen2))
}
