package opencode

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/agentpool/runtime"
	"github.com/threadbox/threadbox/agentpool/runtime/runtimetest"
	"github.com/threadbox/threadbox/sandbox"
)

func newForFake(t testing.TB, m runtimetest.Model) runtime.Runtime {
	rt, err := New(Config{
		Secret: "test-service-secret",
		Model:  Model{API: APIOpenAICompatible, Name: "fake-model", BaseURL: m.URL + "/v1", APIKey: m.APIKey},
	})
	require.NoError(t, err)
	return rt
}

// wrongAuth asks the server for its health with the password of another secret.
func wrongAuth(ctx context.Context, sb sandbox.Sandbox) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://opencode/global/health", nil)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth(username, Password("another-secret", sb.Handle().ID))
	resp, err := runtimetest.DialClient(sb, DefaultPort).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestConformance(t *testing.T) {
	runtimetest.Run(t, runtimetest.Config{New: newForFake, Process: "opencode serve --port", WrongAuth: wrongAuth})
}

// BenchmarkLifecycle reports cold create → healthy and stopped → healthy next to raw docker
// create and start (make bench).
func BenchmarkLifecycle(b *testing.B) {
	runtimetest.Bench(b, runtimetest.Config{New: newForFake})
}

// TestSessionsFoundByTitle: a session is titled by the thread key, and a thread whose stored id is
// lost or stale finds it again by that title instead of starting over.
func TestSessionsFoundByTitle(t *testing.T) {
	p := runtimetest.Provider(t)
	sb, _ := runtimetest.NewSandbox(t, p, t.Name())
	rt := newForFake(t, runtimetest.Model{URL: "http://127.0.0.1:1", APIKey: "unused"})
	ctx := t.Context()
	require.NoError(t, rt.Ensure(ctx, sb))

	const title = "discord:G1:thread-42"
	id, replaced, err := rt.Session(ctx, sb, "", title)
	require.NoError(t, err)
	require.True(t, replaced, "a new session")
	other, _, err := rt.Session(ctx, sb, "", title+"-other")
	require.NoError(t, err)
	require.NotEqual(t, id, other)

	for _, prev := range []string{"", "ses_doesnotexist", "not-even-an-id"} {
		got, replaced, err := rt.Session(ctx, sb, prev, title)
		require.NoError(t, err)
		require.False(t, replaced, "prev %q: found by title, history intact", prev)
		require.Equal(t, id, got)
	}
	got, replaced, err := rt.Session(ctx, sb, id, "ignored when the id exists")
	require.NoError(t, err)
	require.False(t, replaced)
	require.Equal(t, id, got)
}
