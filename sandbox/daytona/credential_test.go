package daytona_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/daytona"
	"github.com/threadbox/threadbox/sandbox/daytona/daytonafake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestAPIKeyValueNeverEntersSandbox: an env entry whose value is (or contains) the Daytona API key
// is refused, whatever its name, at Create (nothing is created) and at Exec; the error never quotes
// the value.
func TestAPIKeyValueNeverEntersSandbox(t *testing.T) {
	f := daytonafake.New(t, daytonafake.Options{Backend: sandboxfake.New(), Snapshots: []string{"mem"}})
	p, err := daytona.New(daytona.Options{APIURL: f.APIURL(), APIKey: daytonafake.APIKey})
	require.NoError(t, err)
	ctx := t.Context()
	labels := sandbox.Labels{Deployment: "cred", Thread: t.Name(), Generation: 1}
	for _, v := range []string{daytonafake.APIKey, "key=" + daytonafake.APIKey} {
		_, err := p.Create(ctx, sandbox.Spec{Image: "mem", Env: map[string]string{"HARMLESS": v}, Labels: labels})
		require.ErrorIs(t, err, sandbox.ErrInvalidSpec, "create with %q", v)
		require.ErrorIs(t, err, sandbox.ErrNoEffect)
		require.NotContains(t, err.Error(), daytonafake.APIKey)
	}
	list, err := p.List(ctx, map[string]string{sandbox.LabelDeployment: "cred"})
	require.NoError(t, err)
	require.Empty(t, list, "nothing was created")

	h, err := p.Create(ctx, sandbox.Spec{Image: "mem", Env: map[string]string{"KEEP": "1"}, Labels: labels})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(ctx, h) })
	_, err = p.Exec(ctx, h, sandbox.ExecRequest{Cmd: []string{"true"}, Env: map[string]string{"X": daytonafake.APIKey + "\n"}})
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
	require.NotContains(t, err.Error(), daytonafake.APIKey)
}
