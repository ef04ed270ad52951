package sandboxagent

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/opencode"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/sandbox"
)

func newForFake(t testing.TB, m runtimetest.Model) runtime.Runtime {
	rt, err := New(Config{
		Secret: "test-service-secret",
		Model:  opencode.Model{API: opencode.APIOpenAICompatible, Name: "fake-model", BaseURL: m.URL + "/v1", APIKey: m.APIKey},
	})
	require.NoError(t, err)
	return rt
}

// wrongAuth asks the server for its health with the token of another secret.
func wrongAuth(ctx context.Context, sb sandbox.Sandbox) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox-agent/v1/health", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+Token("another-secret", sb.Handle().ID))
	resp, err := runtimetest.DialClient(sb, DefaultPort).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestConformance(t *testing.T) {
	runtimetest.Run(t, runtimetest.Config{New: newForFake, Process: "sandbox-agent server --token", WrongAuth: wrongAuth})
}

// BenchmarkLifecycle reports cold create → healthy and stopped → healthy next to raw docker
// create and start (make bench).
func BenchmarkLifecycle(b *testing.B) {
	runtimetest.Bench(b, runtimetest.Config{New: newForFake})
}
