package deno

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestTokenValueNeverEntersSandbox: an env entry whose value is (or contains) the Deno token is
// refused, whatever its name, at Create and at Exec; the error never quotes the value.
func TestTokenValueNeverEntersSandbox(t *testing.T) {
	f := denofake.New(t, denofake.Options{Backend: sandboxfake.New(), Image: "mem", Snapshots: []string{"tb-base"}})
	p, err := New(Options{Token: denofake.Token, ConsoleURL: f.ConsoleURL(), SandboxURL: f.SandboxURL(), Retries: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	ctx := t.Context()
	labels := sandbox.Labels{Deployment: "cred", Thread: t.Name(), Generation: 1}
	for _, v := range []string{denofake.Token, "Bearer " + denofake.Token} {
		_, err := p.Create(ctx, sandbox.Spec{Image: "tb-base", Env: map[string]string{"HARMLESS": v}, Labels: labels})
		require.ErrorIs(t, err, sandbox.ErrInvalidSpec, "create with %q", v)
		require.NotContains(t, err.Error(), denofake.Token)
	}
	require.Zero(t, f.Running(), "nothing was booted")

	h, err := p.Create(ctx, sandbox.Spec{Image: "tb-base", Env: map[string]string{"KEEP": "1"}, Labels: labels})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(ctx, h) })
	_, err = p.Exec(ctx, h, sandbox.ExecRequest{Cmd: []string{"true"}, Env: map[string]string{"X": "pre" + denofake.Token}})
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
	require.NotContains(t, err.Error(), denofake.Token)
}
