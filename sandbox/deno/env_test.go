package deno

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestResumeDropsBlockedEnv: a resume sets the environment stored in the handle, which was written
// when the sandbox was made, perhaps before a name joined the blocklist, and is read back from the
// database. A blocked name in it (a model key) still never enters the sandbox.
func TestResumeDropsBlockedEnv(t *testing.T) {
	f := denofake.New(t, denofake.Options{Backend: sandboxfake.New(), Image: "mem", Snapshots: []string{"tb-base"}})
	p, err := New(Options{Token: denofake.Token, ConsoleURL: f.ConsoleURL(), SandboxURL: f.SandboxURL(), Retries: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	ctx := t.Context()
	h, err := p.Create(ctx, sandbox.Spec{Image: "tb-base", Env: map[string]string{"KEEP": "1"},
		Labels: sandbox.Labels{Deployment: "env", Thread: t.Name(), Generation: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(ctx, h) })
	require.NoError(t, p.Stop(ctx, h))

	st, err := p.decode(h)
	require.NoError(t, err)
	st.Env["OPENAI_API_KEY"] = "sk-secret"
	h.State, err = json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx, h))

	p.mu.Lock()
	lv := p.lives[h.ID]
	p.mu.Unlock()
	require.NotNil(t, lv)
	var keep, key *string
	require.NoError(t, lv.conn.call(ctx, "envGet", map[string]string{"key": "KEEP"}, &keep, nil))
	require.NoError(t, lv.conn.call(ctx, "envGet", map[string]string{"key": "OPENAI_API_KEY"}, &key, nil))
	require.NotNil(t, keep)
	require.Equal(t, "1", *keep)
	require.Nil(t, key, "a blocked name entered the sandbox")
}
