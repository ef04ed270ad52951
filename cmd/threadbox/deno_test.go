package main

import (
	"bytes"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/threadbox/threadbox/sandbox"
	"github.com/threadbox/threadbox/sandbox/deno/denofake"
	"github.com/threadbox/threadbox/sandbox/docker"
	"github.com/threadbox/threadbox/sandbox/docker/dockertest"
	"github.com/threadbox/threadbox/sandbox/sandboxfake"
)

// TestDoctorChecksDeno: doctor checks Deno's console, the token, and the base snapshot in the
// configured region, with one fix per problem.
func TestDoctorChecksDeno(t *testing.T) {
	f := denofake.New(t, denofake.Options{Backend: sandboxfake.New(), Image: "unused", Snapshots: []string{"tb-base"}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	for _, tc := range []struct {
		name, url, token, snapshot, region string
		want                               string // the doctor line about Deno
	}{
		{"healthy", f.ConsoleURL(), denofake.Token, "tb-base", "ord", "ok      deno: console at " + f.ConsoleURL() + " accepts the token"},
		{"bad token", f.ConsoleURL(), "ddo_nope", "tb-base", "ord", "PROBLEM deno: deno: get snapshot tb-base: HTTP 401 INVALID_TOKEN"},
		{"missing snapshot", f.ConsoleURL(), denofake.Token, "other", "ord", "PROBLEM deno: deno base snapshot not usable: other does not exist"},
		{"wrong region", f.ConsoleURL(), denofake.Token, "tb-base", "ams", "PROBLEM deno: deno base snapshot not usable: tb-base is in region ord"},
		{"unreachable", dead, denofake.Token, "tb-base", "ord", "PROBLEM deno: deno console unreachable at " + dead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runMain(t, baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=deno",
				"THREADBOX_SANDBOX_DENO_CONSOLE_URL="+tc.url, "THREADBOX_SANDBOX_DENO_TOKEN="+tc.token,
				"THREADBOX_SANDBOX_DENO_BASE_SNAPSHOT="+tc.snapshot, "THREADBOX_SANDBOX_DENO_REGION="+tc.region), "doctor")
			line := findLine(out, tc.want)
			require.NotEmpty(t, line, "want a line starting %q in:\n%s", tc.want, out)
			if tc.name == "healthy" {
				require.NoError(t, err)
				return
			}
			require.Equal(t, exitCode(1), err)
			require.Contains(t, line, "Fix: ")
		})
	}
}

// TestDenoIsWired: sandbox.provider deno builds the Deno provider from sandbox.deno, and the
// handles it makes name it.
func TestDenoIsWired(t *testing.T) {
	f := denofake.New(t, denofake.Options{Backend: dockertest.New(t, docker.Options{}), Image: dockertest.Image(), Snapshots: []string{"tb-base"}})
	var stdout, stderr bytes.Buffer
	m := NewMain(&stdout, &stderr, baseEnv(t, "THREADBOX_SANDBOX_PROVIDER=deno",
		"THREADBOX_SANDBOX_DENO_CONSOLE_URL="+f.ConsoleURL(), "THREADBOX_SANDBOX_DENO_SANDBOX_URL="+f.SandboxURL(),
		"THREADBOX_SANDBOX_DENO_TOKEN="+denofake.Token, "THREADBOX_SANDBOX_DENO_BASE_SNAPSHOT=tb-base",
		"THREADBOX_DEPLOYMENT=wired"))
	require.NoError(t, m.ParseFlags([]string{"doctor"}))
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	p, warning, err := m.newProvider(t.Context())
	require.NoError(t, err)
	require.Empty(t, warning)
	require.Equal(t, "deno", p.Name())
	h, err := p.Create(t.Context(), sandbox.Spec{Image: "threadbox/sandbox:latest", Labels: sandbox.Labels{Deployment: "wired", Thread: "t"}})
	require.NoError(t, err)
	require.Equal(t, "deno", h.Provider)
	list, err := p.List(t.Context(), map[string]string{sandbox.LabelDeployment: "wired"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "threadbox/sandbox:latest", list[0].Image, "the image is recorded; the base snapshot is what booted")
	require.NoError(t, p.Destroy(t.Context(), h))
}
